"""The quarantine policy: turns scores into decisions; scorers never decide themselves."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from engage.federated.scoring import ClientScore

Action = Literal["aggregate", "exclude", "quarantine"]


@dataclass(frozen=True)
class Decision:
    """What happens to one client's update, and to the client, after scoring."""

    client: str
    round: int
    action: Action
    flags: int  # the client's flags so far, this round's included
    reasons: tuple[str, ...] = ()


@dataclass
class QuarantinePolicy:
    """Flagged updates stay out of the aggregate (when ``exclude_flagged``); a client
    flagged ``after`` times (0: never) is quarantined: never sampled again."""

    after: int = 3
    exclude_flagged: bool = True
    quarantined: set[str] = field(default_factory=set)
    flags: Counter = field(default_factory=Counter)

    def decide(self, scores: list[ClientScore]) -> list[Decision]:
        """One decision per score: aggregate, exclude (flagged) or quarantine (flagged
        ``after`` times); counts the flags as it goes.
        """
        out = []
        for s in scores:
            if s.flagged:
                self.flags[s.client] += 1
            action: Action = "aggregate"
            if s.flagged and self.after and self.flags[s.client] >= self.after:
                self.quarantined.add(s.client)
                action = "quarantine"
            elif s.flagged and self.exclude_flagged:
                action = "exclude"
            out.append(Decision(s.client, s.round, action, self.flags[s.client], s.reasons))
        return out
