"""The ``tune`` and ``adaptive`` sections: search spaces, schedulers, sampling rounds."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from engage.spec.models.base import Name, StrictModel


class SearchParam(StrictModel):
    """One dimension of a tuning search space: how a spec field's value is drawn."""

    type: Literal["loguniform", "uniform", "int", "choice"] = Field(
        description="loguniform/uniform: a float in [low, high]; int: an integer in "
        "[low, high], both ends included; choice: one of values"
    )
    low: float | None = Field(None, description="lowest value (loguniform, uniform, int)")
    high: float | None = Field(None, description="highest value (loguniform, uniform, int)")
    values: list[Any] | None = Field(None, description="the candidates (choice)")

    @model_validator(mode="after")
    def _bounds(self) -> SearchParam:
        if self.type == "choice":
            if not self.values:
                raise ValueError("a choice needs a non-empty values list")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} range needs both low and high")
        if self.low >= self.high:
            raise ValueError(f"low {self.low:g} must be below high {self.high:g}")
        if self.type == "loguniform" and self.low <= 0:
            raise ValueError(f"a loguniform range needs low > 0, got {self.low:g}")
        if self.type == "int" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("an int range needs whole-number low and high")
        return self


class TuneSpec(StrictModel):
    """Tune any spec fields with Ray Tune, then retrain and register the best configuration."""

    space: dict[str, SearchParam] = Field(
        min_length=1,
        description="dotted spec fields (as for --set, e.g. train.learning_rate) and how "
        "each is drawn",
    )
    num_samples: int = Field(8, ge=1, le=10_000, description="trials to run")
    metric: Name = Field(
        "val_loss", description="the per-epoch metric trials are compared on (val_* or train_loss)"
    )
    mode: Literal["min", "max"] | None = Field(
        None, description="min or max; default: the metric's natural direction"
    )
    scheduler: Literal["asha", "none"] = Field(
        "asha", description="asha stops poor trials early; none trains every trial fully"
    )
    searcher: Literal["random", "tpe"] = Field(
        "random", description="random sampling, or Optuna's TPE (Bayesian) search"
    )
    max_concurrent: int = Field(2, ge=1, le=1000, description="trials running at once")
    grace_period: int = Field(
        1, ge=1, le=100_000, description="epochs every trial runs before ASHA may stop it"
    )
    reduction_factor: int = Field(
        2, ge=2, le=100, description="ASHA keeps 1/reduction_factor of trials at each rung"
    )
    cpus_per_trial: float = Field(1.0, gt=0.0, le=1024.0, description="CPUs each trial holds")
    seed: int = Field(0, ge=0, description="seed of the searcher; same seed, same trials")


class AdaptiveSpec(StrictModel):
    """Adaptive sampling of the simulator's scenario space: simulate where the model is weakest."""

    sampler: Literal["adaptive", "uniform", "lhs"] = Field(
        "adaptive",
        description="adaptive (acquisition over a candidate pool), uniform (random) or lhs "
        "(Latin hypercube): the last two for comparison",
    )
    acquisition: Literal["disagreement", "error", "out_of_bag"] = Field(
        "disagreement",
        description="adaptive's score of a candidate: ensemble disagreement (variance of the "
        "members' predictions) or the ensemble's error on it, both on probes; or out_of_bag: "
        "no probes, the members' out-of-bag error on the scenarios simulated so far",
    )
    rounds: int = Field(6, ge=1, le=1000, description="rounds of simulate, retrain, evaluate")
    initial_scenarios: int = Field(
        4, ge=1, le=10_000, description="scenarios of the first round (a Latin hypercube)"
    )
    scenarios_per_round: int = Field(
        4, ge=1, le=10_000, description="scenarios each later round adds"
    )
    households: int = Field(1, ge=1, le=1000, description="households simulated per scenario")
    days: int = Field(2, ge=1, le=366, description="days simulated per scenario")
    budget: int | None = Field(
        None,
        ge=1,
        description="most training samples (windows) simulated in all; unset: rounds decide",
    )
    candidates: int = Field(
        4,
        ge=1,
        le=100_000,
        description="uniform candidates adaptive probes each round (with probe_hours: at "
        "least, the round's leftover hours probe more); their windows are trained on and "
        "counted as samples, and paid for from the round's scenarios. out_of_bag: the pool "
        "its surrogate scores, at no cost",
    )
    probe_days: int = Field(
        1, ge=1, le=366, description="days of one household simulated to score a candidate"
    )
    probe_hours: int | None = Field(
        None,
        ge=1,
        le=8784,
        description="probe a candidate for its first probe_hours hours (all its households) "
        "instead of probe_days of one household, and continue the chosen candidates to their "
        "full days: a probe's windows are part of its scenario, never simulated twice "
        "(12 h, 10 candidates: on 20 tuning seeds 0.927 mean accuracy at half the samples "
        "against 0.912 with 1-day probes and 0.915 uniform; 4 h probes, all night, scored "
        "poorly; pipelines/adaptive_sampling.yaml now uses span_hours instead)",
    )
    revisit: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="out_of_bag only: share of a round's scenarios that continue (the same "
        "households, their next days) the scenarios with the highest out-of-bag error; the "
        "rest are the best of candidates fresh uniform points by a surrogate of that error "
        "(0.5 and 1 tested below uniform: a household's error on one day says little about "
        "the next)",
    )
    span_hours: int | None = Field(
        None,
        ge=1,
        le=8784,
        description="rounds after the first simulate spans of span_hours hours of fresh "
        "scenarios (each its own point and seed, cut to the span) instead of whole "
        "scenarios, as many as the round's scenario-hours buy; every sampler (uniform and "
        "lhs start a span anywhere; adaptive needs acquisition out_of_bag and starts it in "
        "an hour of the day drawn by the out-of-bag error per hour). Below days x 24",
    )
    span_mix: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="adaptive with span_hours: share of a span's start-hour probability "
        "drawn by the out-of-bag error per hour; the rest is spread evenly over the day",
    )
    test_scenarios: int = Field(
        24,
        ge=1,
        le=100_000,
        description="held-out scenarios over the whole space (a Latin hypercube)",
    )
    ensemble: int = Field(
        3, ge=2, le=100, description="models trained each round, with different seeds"
    )
    seed: int = Field(0, ge=0, description="seed of the sampler and the simulations")

    @field_validator("probe_hours")
    @classmethod
    def _probes_fit_a_round(cls, hours: int | None, info: ValidationInfo) -> int | None:
        """Short probes are the start of a scenario and must leave a round room to continue
        one candidate (checked here, so the error points at ``probe_hours``)."""
        given = info.data
        needed = ("sampler", "acquisition", "days", "scenarios_per_round", "candidates")
        if hours is None or any(k not in given for k in needed):
            return hours  # an earlier field already failed: reported on its own
        if given["sampler"] != "adaptive" or given["acquisition"] == "out_of_bag":
            return hours
        whole = given["days"] * 24
        if hours >= whole:
            raise ValueError(
                f"got {hours}; a probe is the first part of a scenario: it must be below "
                f"days x 24 ({whole})"
            )
        room = given["scenarios_per_round"] * whole - given["candidates"] * hours
        if room < whole - hours:
            raise ValueError(
                f"got {hours}: candidates x probe_hours ({given['candidates']} x {hours} h) "
                f"must leave a round of scenarios_per_round x days ({given['scenarios_per_round']}"
                f" x {given['days']} days) room to continue one candidate to its {whole} hours"
            )
        return hours

    @field_validator("span_hours")
    @classmethod
    def _spans_fit(cls, hours: int | None, info: ValidationInfo) -> int | None:
        """A span is shorter than a scenario, and adaptive scores spans out of bag (checked
        here, so the error points at ``span_hours``)."""
        given = info.data
        if hours is None or any(k not in given for k in ("sampler", "acquisition", "days")):
            return hours  # an earlier field already failed: reported on its own
        whole = given["days"] * 24
        if hours >= whole:
            raise ValueError(
                f"got {hours}; a span is part of a scenario: it must be below days x 24 ({whole})"
            )
        if given["sampler"] == "adaptive" and given["acquisition"] != "out_of_bag":
            raise ValueError(
                f"got {hours} with acquisition {given['acquisition']}: adaptive spans are "
                "chosen by the ensemble's out-of-bag error (acquisition: out_of_bag), "
                "without probes"
            )
        return hours

    @model_validator(mode="after")
    def _room_for_a_choice(self) -> AdaptiveSpec:
        """Adaptive's probes must leave a round room for at least one chosen scenario."""
        scenario = self.households * self.days
        room = (self.scenarios_per_round - 1) * scenario
        probes = self.sampler == "adaptive" and self.acquisition != "out_of_bag"
        if probes and self.probe_hours is not None:
            return self  # checked on the field (_probes_fit_a_round)
        if probes and self.candidates * self.probe_days > room:
            raise ValueError(
                f"candidates x probe_days ({self.candidates} x {self.probe_days} household-days) "
                f"must leave a round of scenarios_per_round x households x days "
                f"({self.scenarios_per_round} x {self.households} x {self.days}) room for one "
                f"chosen scenario: at most {room} household-days of probes"
            )
        return self
