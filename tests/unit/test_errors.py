"""The exception root: message, hint and pickling (errors cross Ray actors)."""

from __future__ import annotations

import pickle

import pytest

from engage.errors import EngageError


def _all_subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_all_subclasses(sub)]
    return found


ERRORS = [EngageError, *_all_subclasses(EngageError)]


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_error_pickles_with_message_and_hint(cls: type[EngageError]) -> None:
    error = cls("what went wrong", hint="how to fix it")

    back = pickle.loads(pickle.dumps(error))

    assert type(back) is cls
    assert (back.message, back.hint) == ("what went wrong", "how to fix it")


def test_str_adds_the_hint_on_its_own_line() -> None:
    assert str(EngageError("bad")) == "bad"
    assert str(EngageError("bad", hint="do x")) == "bad\n  hint: do x"


def test_federated_error_has_its_own_documented_exit_code() -> None:
    from engage.cli.exit_codes import EXIT_CODES
    from engage.errors import FederatedError

    assert FederatedError.exit_code not in (EngageError.exit_code, 70, 130)
    assert "federated" in EXIT_CODES[FederatedError.exit_code]
    assert FederatedError.headline == "federated job failed"
