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
