"""Errors a user causes by naming a model, an override or an op that does not exist. No mlx here, so
the command line can recognise them without importing the model."""


class ModelInputError(ValueError):
    """A model, override or op name that cannot be used; the message names the valid choices."""


class ModelConfigError(ModelInputError):
    """A preset, override or checkpoint that cannot be built; the message names the valid
    choices."""


class UnknownOpError(ModelInputError):
    """An op or variant name that the registry does not hold; the message lists the valid
    choices."""
