"""The one family of errors a user can cause. The command line turns each into one line and exit
code 2.

Every input error in bench derives from `UserError`; the model's own input errors derive from
`fusebench.models.errors.ModelInputError`. `INPUT_ERRORS` is the pair the command line catches, so a
new error class is an input error by inheriting, never by being added to a list somewhere else.
"""

from __future__ import annotations

from fusebench.models.errors import ModelInputError


class UserError(ValueError):
    """Bad input: a file, a field, an argument. `str(err)` is one line that names it and the valid
    choices."""


INPUT_ERRORS: tuple[type[ValueError], ...] = (UserError, ModelInputError)


class SpecError(UserError):
    """An experiment file that cannot be run. `str(err)` is one line:
    `FILE:LINE: FIELD: MESSAGE`."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file, self.line, self.field = file, line, field
        self.message = " ".join(message.split())  # one line, whatever the YAML library produced
        super().__init__(f"{file}:{line}: {field}: {self.message}")

    def __reduce__(self) -> tuple[type[SpecError], tuple[str, int, str, str]]:
        # Rebuilt from its parts, so the error survives the trip back from a worker process.
        return SpecError, (self.file, self.line, self.field, self.message)
