"""User plugins: op variants registered from files outside the package."""

from __future__ import annotations

import hashlib
import re

import mlx.core as mx
import pytest

from fusebench.measure.plugins import PluginError, load_plugins
from fusebench.models.calls import calls_of
from fusebench.models.ops import calls_by_op

GOOD = """\
import mlx.core as mx
from fusebench.models.ops import register


@register("softcap", "plugin_ok")
def softcap_plugin(x, cap):
    return mx.tanh(x / cap) * cap
"""


# Whatever a test declares or registers is gone afterwards (conftest's `registry`), so other test
# files see the built-in ops only.
pytestmark = pytest.mark.usefixtures("registry")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_correct_plugin_registers_its_variant(tmp_path, registry):
    path = write(tmp_path, "good.py", GOOD)
    [info] = load_plugins([path])
    assert "plugin_ok" in registry["softcap"].variants
    assert info.path == path.resolve() and info.variants == (("softcap", "plugin_ok"),)
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    x = mx.array([-100.0, -1.0, 0.0, 2.0, 100.0])
    expected = registry["softcap"].variants["unfused"](x, 30.0)
    assert mx.allclose(registry["softcap"].variants["plugin_ok"](x, 30.0), expected).item()


def test_loading_the_same_file_twice_is_harmless(tmp_path, registry):
    path = write(tmp_path, "good.py", GOOD)
    first = load_plugins([path, path])
    assert first[0] == first[1]
    again = load_plugins([path])[0]
    assert again == first[0] and list(registry["softcap"].variants).count("plugin_ok") == 1


def test_a_changed_file_replaces_its_own_variants(tmp_path, registry):
    path = write(tmp_path, "good.py", GOOD)
    load_plugins([path])
    path.write_text(GOOD.replace("plugin_ok", "plugin_two"))
    [info] = load_plugins([path])
    assert info.variants == (("softcap", "plugin_two"),)
    assert (
        "plugin_two" in registry["softcap"].variants
        and "plugin_ok" not in registry["softcap"].variants
    )


def one_line_error(paths):
    with pytest.raises(PluginError) as caught:
        load_plugins(paths)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_syntax_error_is_one_line_with_its_line(tmp_path):
    path = write(
        tmp_path,
        "broken.py",
        "from fusebench.models.ops import register\n\n\ndef oops(:\n    pass\n",
    )
    message = one_line_error([path])
    assert re.fullmatch(rf"{re.escape(str(path))}:4: plugin: SyntaxError: .+", message), message


def test_a_runtime_error_is_one_line_with_its_line(tmp_path, registry):
    text = GOOD + "\n\nvalues = {}\nbroken = values['missing']\n"
    path = write(tmp_path, "raises.py", text)
    line = text.splitlines().index("broken = values['missing']") + 1
    message = one_line_error([path])
    assert message == f"{path}:{line}: plugin: KeyError: 'missing'"
    # The variant the file registered before failing is rolled back.
    assert "plugin_ok" not in registry["softcap"].variants


def test_an_unknown_op_is_one_line_with_its_line(tmp_path):
    text = (
        "from fusebench.models.ops import register\n\n\n"
        '@register("no_such_op", "x")\ndef f(x):\n    return x\n'
    )
    path = write(tmp_path, "unknown.py", text)
    message = one_line_error([path])
    assert re.fullmatch(
        rf"{re.escape(str(path))}:[45]: plugin: UnknownOpError: unknown op 'no_such_op'; .+",
        message,
    )


def test_replacing_a_builtin_variant_is_refused(tmp_path, registry):
    builtin = registry["geglu"].variants["compiled"]
    text = (
        "from fusebench.models.ops import register\n\n\n"
        '@register("geglu", "compiled")\ndef g(gate, up):\n    return gate\n'
    )
    path = write(tmp_path, "hijack.py", text)
    message = one_line_error([path])
    assert message.startswith(
        f"{path}:4: plugin: ValueError: geglu variant 'compiled' is already registered"
    )
    assert registry["geglu"].variants["compiled"] is builtin


def test_a_missing_file_is_one_line(tmp_path):
    message = one_line_error([tmp_path / "absent.py"])
    assert message.startswith(f"{tmp_path / 'absent.py'}: plugin: FileNotFoundError")


NEW_OP = """\
import mlx.core as mx
from fusebench.models.ops import OpCalls, OpCase, declare, register, register_calls

declare("plugin_double", "x * 2", reference="plain", default="plain")


@register("plugin_double", "plain")
def double(x):
    return x * 2


register("plugin_double", "compiled")(mx.compile(double))


@register_calls("plugin_double")
class DoubleCalls(OpCalls):
    def cases(self, args, batch, length):
        return [OpCase("plugin_double", "hidden", ((batch, length, args.hidden_size),))]
"""


def test_a_plugin_declares_a_new_op_with_its_variants_and_calls(tmp_path, registry):
    path = write(tmp_path, "double.py", NEW_OP)
    [info] = load_plugins([path])
    assert info.ops == ("plugin_double",)
    assert info.variants == (("plugin_double", "plain"), ("plugin_double", "compiled"))
    assert (
        list(registry)[-1] == "plugin_double"
        and calls_of("plugin_double") is calls_by_op()["plugin_double"] is not None
    )
    assert load_plugins([path]) == [info]  # unchanged: not imported again
    path.write_text(NEW_OP.replace('"x * 2"', '"twice x"'))
    [changed] = load_plugins([path])  # changed: it declares its op anew
    assert changed.ops == ("plugin_double",) and registry["plugin_double"].doc == "twice x"


def test_declaring_an_existing_op_is_refused(tmp_path, registry):
    builtin = registry["geglu"]
    text = (
        "from fusebench.models.ops import declare\n\n"
        'declare("geglu", "mine", reference="a", default="a")\n'
    )
    message = one_line_error([write(tmp_path, "redeclare.py", text)])
    assert message.startswith(
        f"{tmp_path / 'redeclare.py'}:3: plugin: ValueError: op 'geglu' is already declared"
    )
    assert registry["geglu"] is builtin


def test_a_failed_plugin_takes_its_new_op_away(tmp_path, registry):
    path = write(tmp_path, "double.py", NEW_OP + "\nraise RuntimeError('not today')\n")
    one_line_error([path])
    assert "plugin_double" not in registry


@pytest.mark.parametrize("old", ["models.ops", "bench.measure.plugins"])
def test_a_plugin_with_the_old_import_is_told_the_new_one(tmp_path, old):
    path = write(tmp_path, "old.py", f"import mlx.core as mx\nfrom {old} import register\n")
    message = one_line_error([path])
    assert message.startswith(f"{path}:2: plugin: `{old.split('.')[0]}` is `fusebench")
    assert "from fusebench.models.ops import register" in message
