"""
The lab's command lines, one convention: the configurator's --key=value (configurator.load_config
with a dict of defaults: a value keeps its default's type, an unknown key or a bad value is a
ConfigError of one line, exit 2), and --help printing the command's docstring and its keys. An error is
one line on stderr, `error: ...`, and an exit code (fail): no traceback.
"""

from configurator import ConfigError, describe, fail, load_config     # fail: the lab's commands' too


def wants_help(argv):
    return bool(argv) and argv[0] in ('-h', '--help')


def help_text(doc, defaults, choices=None, more=''):
    """--help: the module's docstring, then every key with its default (and its values, where fixed)."""
    return doc.strip() + '\n\nkeys and defaults:\n' + describe(defaults, choices) + more


def load(defaults, argv, choices=None, files=False):
    """load_config(defaults, argv, choices). A positional argument is a config file (train.py's keys) only
    where files=True; elsewhere it is a ConfigError: every option is --key=value."""
    if not files:
        bad = next((a for a in argv if not a.startswith('--')), None)
        if bad is not None:
            raise ConfigError(f"unexpected argument {bad!r}: the options are --key=value (--help lists them)")
    return load_config(defaults, argv, choices)


def parse(doc, defaults, argv):
    """(options, None), or (None, the exit code) once --help is printed (0) or a one-line error (2)."""
    if wants_help(argv):
        print(help_text(doc, defaults))
        return None, 0
    try:
        return load(defaults, argv), None
    except ConfigError as e:
        return None, fail(e)
