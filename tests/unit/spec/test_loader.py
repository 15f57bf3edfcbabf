"""Loading specs from YAML: every malformed spec gives one located, plain message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engage.errors import SpecError
from engage.spec import LoadedSpec, load_spec, parse_spec

from .specs import MINIMAL, VALID


def edit(old: str, new: str) -> str:
    """VALID with one exact fragment replaced (asserting it was there)."""
    assert old in VALID, old
    return VALID.replace(old, new, 1)


def case(name: str, text: str, where: str, *fragments: str):
    """A malformed spec: ``where`` is ``"LINE FIELD.PATH"`` (or ``"LINE:COL"``)."""
    line, _, field = where.partition(" ")
    return pytest.param(text, line, field, fragments, id=name)


E = edit
SOURCE = "    type: synthetic\n    households: 2\n"
GATE_DIR = "tracking.registration.gate.direction"
# A table reads better one case per line, so the formatter leaves it alone.
# fmt: off
MALFORMED = [
    case("yaml-syntax", E("    households: 2", "   households: 2"), "6:4", "YAML syntax error"),
    case("yaml-flow", E("  target: occupied", "  target: [occupied"), "9:7", "expected ','"),
    case("yaml-two-docs", "a: 1\n---\nb: 2\n", "2:1", "single document"),
    case("yaml-python-tag", "!!python/object:os.system {}\n", "1:1", "unsupported YAML"),
    case("empty-file", "", "1", "the file is empty"),
    case("comments-only", "# nothing here\n", "1", "the file is empty"),
    case("list-at-root", "- a\n- b\n", "1", "must be a mapping", "got a list"),
    case("duplicate-key", E("  batch_size: 32\n", "  batch_size: 32\n  epochs: 3\n"),
         "20 train.epochs", "duplicate key 'epochs' at lines 18 and 20"),
    case("epochs-string", E("epochs: 2", "epochs: two"), "18 train.epochs",
         "got 'two'; expected an integer"),
    case("unknown-top-level", VALID + "extras: 1\n", "28 extras", "unknown key", "valid keys"),
    case("unknown-nested", E("epochs: 2", "epoch: 2"), "18 train.epoch",
         "unknown key; did you mean 'epochs'?"),
    case("missing-target", E("  target: occupied\n", ""), "3 data.target",
         "missing required field"),
    case("missing-model", E("model:\n  name: mlp\n  params:\n    hidden: 16\n", ""), "1 model",
         "missing required field"),
    case("num-workers-zero", E("num_workers: 2", "num_workers: 0"), "22 train.num_workers",
         "got 0; expected >= 1"),
    case("lr-negative", E("learning_rate: 0.01", "learning_rate: -0.1"),
         "21 train.learning_rate", "got -0.1; expected > 0"),
    case("lr-string", E("learning_rate: 0.01", "learning_rate: fast"), "21 train.learning_rate",
         "got 'fast'; expected a number"),
    case("batch-zero", E("batch_size: 32", "batch_size: 0"), "19 train.batch_size",
         "got 0; expected >= 1"),
    case("batch-below-workers", E("batch_size: 32", "batch_size: 1"), "19 train.batch_size",
         "smaller than num_workers 2"),
    case("unknown-model", E("name: mlp", "name: transformer"), "14 model.name",
         "got 'transformer'", "cnn1d, gru, mlp"),
    case("model-param-negative", E("hidden: 16", "hidden: -1"), "16 model.params.hidden",
         "got -1; expected >= 1"),
    case("model-param-unknown", E("hidden: 16", "hiden: 16"), "16 model.params.hiden",
         "did you mean 'hidden'?", "valid keys: dropout, hidden, layers"),
    case("source-type-unknown", E("type: synthetic", "type: sql"), "5 data.source.type",
         "got 'sql'; expected one of 'synthetic', 'simulation', 'csv', 'parquet'"),
    case("source-type-missing", E("    type: synthetic\n", ""), "4 data.source.type",
         "expected one of 'synthetic', 'simulation', 'csv', 'parquet'"),
    case("source-not-mapping", E(SOURCE, "    d.csv\n"), "4 data.source",
         "got 'd.csv'; expected a mapping"),
    case("csv-without-path", E(SOURCE, "    type: csv\n"), "4 data.source.path",
         "missing required field"),
    case("split-sum", E("{train: 0.6,", "{train: 0.5,"), "12 data.split",
         "train + val + test must be 1.0, got 0.9"),
    case("split-zero", E("{train: 0.6,", "{train: 0,"), "12 data.split.train",
         "got 0; expected > 0"),
    case("features-duplicate", E("[co2, temperature]", "[co2, co2]"), "7 data.features",
         "duplicate feature(s) co2"),
    case("features-not-list", E("[co2, temperature]", "co2"), "7 data.features",
         "got 'co2'; expected a list"),
    case("target-is-feature", E("[co2, temperature]", "[co2, occupied]"), "8 data.target",
         "'occupied' is also a feature with horizon 0"),
    case("task-literal", E("task: classification", "task: forecasting"), "9 data.task",
         "got 'forecasting'; expected one of 'classification', 'regression'"),
    case("window-zero", E("window: 10", "window: 0"), "10 data.window", "got 0; expected >= 1"),
    case("optimizer-literal", E("optimizer: adam", "optimizer: adm"), "20 train.optimizer",
         "got 'adm'; expected one of 'adam', 'adamw', 'sgd'"),
    case("use-gpu-not-bool", E("num_workers: 2", "use_gpu: maybe"), "22 train.use_gpu",
         "got 'maybe'; expected true or false"),
    case("resources-negative", E("{CPU: 1}", "{CPU: -1}"), "23 train.resources_per_worker",
         "resource amounts must be > 0"),
    case("name-with-spaces", E("name: occupancy\n", "name: my pipeline\n"), "1 name",
         "got 'my pipeline'; expected a name of letters"),
    case("registration-no-name", E("    model_name: occupancy\n", ""),
         "25 tracking.registration.model_name", "missing required field"),
    case("gate-metric-not-produced", E("metric: val_accuracy", "metric: val_mae"),
         "27 tracking.registration.gate.metric",
         "got 'val_mae'; expected a metric the classification task produces", "val_f1"),
    case("gate-direction-wrong", E("direction: maximize", "direction: minimize"),
         f"27 {GATE_DIR}", "expected 'maximize': val_accuracy improves as it increases"),
    case("gate-direction-literal", E("direction: maximize", "direction: up"), f"27 {GATE_DIR}",
         "got 'up'; expected one of 'maximize', 'minimize'"),
]
# fmt: on


@pytest.mark.parametrize(("text", "line", "field", "fragments"), MALFORMED)
def test_malformed_spec_is_located(write_spec, text, line, field, fragments):
    path = write_spec(text)

    with pytest.raises(SpecError) as info:
        load_spec(path)

    message = info.value.message
    head = f"{path}:{line}: {field}: " if field else f"{path}:{line}: "
    assert message.startswith(head), message
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message, "one problem, one line"
    assert "docs/spec.md" in (info.value.hint or "")


def test_table_has_at_least_25_distinct_specs():
    texts = [param.values[0] for param in MALFORMED]
    assert len(set(texts)) == len(texts) >= 25


def test_valid_spec_loads_with_file_facts(write_spec):
    path = write_spec(VALID)

    loaded = load_spec(path)

    assert isinstance(loaded, LoadedSpec)
    assert loaded.spec.train.epochs == 2
    assert loaded.path == path
    assert loaded.base_dir == path.resolve().parent
    assert loaded.text == VALID
    assert loaded.overrides == ()


def test_minimal_spec_fills_defaults(write_spec):
    loaded = load_spec(write_spec(MINIMAL))

    resolved = loaded.resolved()

    assert resolved["train"]["epochs"] == 5
    assert resolved["data"]["source"] == {
        "type": "synthetic",
        "households": 4,
        "days": 14,
        "seed": 0,
        "start": "2026-01-05",
        "noise": 1.0,
    }


@pytest.mark.parametrize(
    ("field", "line"),
    [
        (("name",), 1),
        (("data",), 3),
        (("data", "source", "type"), 5),
        (("data", "features", 1), 7),
        (("train", "epochs"), 18),
        (("tracking", "registration", "gate", "metric"), 27),
        (("train", "weight_decay"), 17),  # absent: its parent's line
        (("data", "split", "val"), 12),  # a flow mapping on one line
    ],
)
def test_locate_returns_line_of_field(write_spec, field, line):
    path = write_spec(VALID)

    assert load_spec(path).locate(*field) == f"{path}:{line}"


def test_error_for_a_later_check_is_located(write_spec):
    path = write_spec(VALID)
    loaded = load_spec(path)

    error = loaded.error(("train", "batch_size"), "got 32; expected <= 10 rows of data")

    assert isinstance(error, SpecError)
    assert error.message == f"{path}:19: train.batch_size: got 32; expected <= 10 rows of data"
    assert error.hint == f"run `engage validate {path}` after fixing; see docs/spec.md"


def test_several_problems_are_listed_in_file_order(write_spec):
    text = edit("epochs: 2", "epochs: 0").replace("window: 10", "window: 0")
    path = write_spec(text)

    with pytest.raises(SpecError) as info:
        load_spec(path)

    lines = info.value.message.splitlines()
    assert lines == [
        f"{path}:10: data.window: got 0; expected >= 1",
        f"{path}:18: train.epochs: got 0; expected >= 1",
    ]


def test_long_values_are_truncated(write_spec):
    path = write_spec(edit("description: test spec\n", "description: [" + "x, " * 100 + "]\n"))

    with pytest.raises(SpecError) as info:
        load_spec(path)

    got = info.value.message.split("got ", 1)[1].split(";")[0]
    assert got.endswith("...")
    assert len(got) <= 60


def test_relative_csv_path_resolves_against_spec_dir(write_spec, tmp_path):
    text = edit("    type: synthetic\n    households: 2\n", "    type: csv\n    path: rows.csv\n")

    loaded = load_spec(write_spec(text))

    assert loaded.spec.data.source.path == str(tmp_path.resolve() / "rows.csv")


def test_parse_spec_names_origin_and_resolves_against_base_dir(tmp_path):
    text = edit("    type: synthetic\n    households: 2\n", "    type: parquet\n    path: r.pq\n")

    loaded = parse_spec(text, base_dir=tmp_path)
    with pytest.raises(SpecError) as info:
        parse_spec(edit("epochs: 2", "epochs: 0"), origin="inline.yaml")

    assert loaded.path is None
    assert loaded.spec.data.source.path == str(tmp_path.resolve() / "r.pq")
    assert info.value.message.startswith("inline.yaml:18: train.epochs: got 0")


def test_nonexistent_file(tmp_path):
    missing = tmp_path / "nope.yaml"

    with pytest.raises(SpecError, match="no such file") as info:
        load_spec(missing)

    assert info.value.message.startswith(str(missing))


def test_directory_and_binary_file_are_spec_errors(tmp_path, write_spec):
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00name")

    with pytest.raises(SpecError, match="is a directory"):
        load_spec(tmp_path)
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(binary)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: &x [*x]\n", "alias refers to its own ancestor"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcd", "bcde", strict=True)
            )
            + "f: [*e, *e]\n",
            "aliases expand the document",
        ),
    ],
    ids=["recursive", "billion-laughs"],
)
def test_alias_bombs_are_refused(write_spec, text, fragment):
    with pytest.raises(SpecError, match=fragment):
        load_spec(write_spec(text))


def test_importing_spec_imports_neither_torch_nor_ray():
    code = (
        "import sys, engage.spec, engage.spec.reference; "
        "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    )

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[]"


def test_errors_pickle(write_spec):
    import pickle

    with pytest.raises(SpecError) as info:
        load_spec(write_spec(""))

    again = pickle.loads(pickle.dumps(info.value))
    assert (again.message, again.hint) == (info.value.message, info.value.hint)


def test_file_path_is_reported_as_given(write_spec, monkeypatch, tmp_path):
    write_spec(edit("epochs: 2", "epochs: 0"))
    monkeypatch.chdir(tmp_path)

    with pytest.raises(SpecError) as info:
        load_spec(Path("spec.yaml"))

    assert info.value.message.startswith("spec.yaml:18: train.epochs")


def test_loaded_spec_built_by_hand_still_locates():
    spec = parse_spec(MINIMAL).spec

    loaded = LoadedSpec(spec, Path("p.yaml"), Path("."), MINIMAL, ())

    assert loaded.locate("train", "epochs") == "p.yaml:1"
