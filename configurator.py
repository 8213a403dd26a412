"""
Typed configuration for train.py and sample.py.

    python train.py config/ega_mope.py config/cpu.py --max_iters=500 --compile=False

Config files are plain Python (.py, UTF-8, a byte-order mark allowed), executed in
order; each sees the values so far and may assign only known keys, and a line that
assigns nothing (an annotation `n_layer: 3`, a bare expression) is an error. Then
every `--key=value` overrides. Values keep the type of the default (an int is
accepted for a float, which must be finite; bools take True/False/true/false/1/0),
and keys with a fixed set of values are checked against it. Any mistake raises ConfigError with a one-line message, before a
single tensor is allocated.
"""

import ast
import difflib
import math
import sys
import types

_BOOLS = {'true': True, 'false': False, '1': True, '0': False}


class ConfigError(Exception):
    pass


def fail(e, code=2):
    """Every command's error: one line, `error: {e}`, on stderr; returns the exit code (2: a bad option or
    input; 1: the work failed)."""
    print('error: ' + str(e).replace('\n', ' '), file=sys.stderr)
    return code


def _hint(name, valid):
    close = difflib.get_close_matches(name, list(valid), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ''


def _typename(v):
    return type(v).__name__


def _article(kind):
    return f"an {kind.__name__}" if kind is int else f"a {kind.__name__}"


def coerce(key, value, default, choices=None, where='', cli=False):
    """`value` for `key`, checked against the type of `default` and `choices`.
    Strings from the command line (cli=True) are parsed; values from config
    files are Python objects and must already have the right type."""
    if not cli and isinstance(value, str) and not isinstance(default, str):
        raise ConfigError(f"{where}{key}={value!r}: expected {_typename(default)}, got str")
    if choices is not None and any(isinstance(c, bool) for c in choices) and \
            isinstance(value, str) and value.lower() in _BOOLS:
        value = _BOOLS[value.lower()]               # e.g. compile: auto / True / False
    elif isinstance(default, bool) or (choices is not None and isinstance(value, bool)):
        if isinstance(value, str) and value.lower() in _BOOLS:
            value = _BOOLS[value.lower()]
        elif isinstance(value, int) and value in (0, 1):
            value = bool(value)
        else:
            raise ConfigError(f"{where}{key}={value!r}: expected a bool (True/False/true/false/1/0)")
    elif isinstance(default, (int, float)):
        # an int key takes an int; a float key takes an int or a float, stored as float
        kind, ok = (float, (int, float)) if isinstance(default, float) else (int, int)
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise ConfigError(f"{where}{key}={value!r}: expected {_article(kind)}") from None
        elif isinstance(value, bool) or not isinstance(value, ok):
            raise ConfigError(f"{where}{key}={value!r}: expected {_article(kind)}, got {_typename(value)}")
        value = kind(value)
        if not math.isfinite(value):        # nan passes every >= check; inf every <=
            raise ConfigError(f"{where}{key}={value!r}: expected a finite number")
    elif isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{where}{key}={value!r}: expected a str, got {_typename(value)}")
    if choices is not None and value not in choices:
        # the part that is wrong (of a composition 'a+b', for attn), and the valid names nearest it
        part = next((p for p in value.split('+') if p not in choices), value) if isinstance(value, str) else value
        close = difflib.get_close_matches(str(part), [str(c) for c in choices], n=3, cutoff=0.6)
        hint = f": did you mean {' or '.join(close)}? (one of" if close else ' is not one of'
        raise ConfigError(f"{where}{key}={value!r}{hint}: {', '.join(map(str, choices))}{')' if close else ''}")
    return value


def _assigns_only(src, path):
    """A ConfigError for a top-level line of a config file that sets nothing (a SyntaxError passes up)."""
    for node in ast.parse(src, path).body:
        if isinstance(node, ast.AnnAssign) and node.value is None:
            name = ast.unparse(node.target)
            raise ConfigError(f"{path}:{node.lineno}: '{ast.unparse(node)}' is an annotation, which sets nothing: "
                              f"write {name} = {ast.unparse(node.annotation)}")
        if isinstance(node, ast.Expr) and not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            raise ConfigError(f"{path}:{node.lineno}: '{ast.unparse(node)[:60]}' is an expression, which sets "
                              f"nothing: a config line assigns a key (n_layer = 6)")


def _exec_file(path, cfg, choices):
    if not path.endswith('.py'):
        raise ConfigError(f"config file {path} is not a .py file: config files are Python (n_layer = 6), "
                          f"options are --key=value")
    try:
        with open(path, encoding='utf-8-sig') as f:       # -sig: a byte-order mark (Notepad's) is no syntax error
            src = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                          f"{e.start}): save it as UTF-8") from None
    ns = dict(cfg)
    try:
        _assigns_only(src, path)
        exec(compile(src, path, 'exec'), ns)
    except SyntaxError as e:
        raise ConfigError(f"{path}{f':{e.lineno}' if e.lineno else ''}: syntax error: {e.msg}") from None
    except Exception as e:
        raise ConfigError(f"{path}: {type(e).__name__}: {e}") from None
    for name, value in ns.items():
        if name.startswith('_') or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue                                    # imports and helpers are fine
        if name not in cfg:
            raise ConfigError(f"{path}: unknown name '{name}'{_hint(name, cfg)}")
        if value is not cfg[name]:
            cfg[name] = coerce(name, value, cfg[name], choices.get(name), where=f"{path}: ")


def load_config(defaults, argv, choices=None):
    """defaults: {key: default value}; argv: config file paths and --key=value.
    Returns a new dict of the same keys."""
    choices = choices or {}
    cfg = dict(defaults)
    for arg in argv:
        if not arg.startswith('--'):
            _exec_file(arg, cfg, choices)
            continue
        key, eq, value = arg[2:].partition('=')
        if key not in cfg:
            raise ConfigError(f"unknown config key '{key}'{_hint(key, cfg)}")
        if not eq:
            raise ConfigError(f"--{key} needs a value: --{key}=VALUE")
        cfg[key] = coerce(key, value, defaults[key], choices.get(key), where='--', cli=True)
    return cfg


def describe(defaults, choices=None):
    """The keys, defaults and allowed values, for --help."""
    choices = choices or {}
    lines = []
    for k, v in defaults.items():
        extra = f"  [{', '.join(map(str, choices[k]))}]" if k in choices else ''
        lines.append(f"  --{k}={v!r}{extra}")
    return '\n'.join(lines)
