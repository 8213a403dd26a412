"""Every torch API the repository's code uses exists in torch 2.11 (the GPU machine's torch).

CI runs torch 2.13 and has no internet, so it cannot install 2.11 to try the code there.
Instead tests/torch_2_11_api.txt lists, as torch 2.11.0 itself reported them, the members of
every torch module and class this code touches (with each callable's parameter names), and
this test walks the code's syntax tree and checks each torch name it uses against that list:
  - dotted names rooted at torch or at a name imported from it (F = torch.nn.functional,
    nn = torch.nn, `from torch.profiler import profile`, ...): torch.nn.functional.softmax;
  - keyword arguments passed to such a callable: torch.optim.AdamW(fused=);
  - attributes used on anything else whose name is a member of torch.Tensor, nn.Module or
    optim.Optimizer under the running torch (x.masked_fill, model.compile): the syntax tree
    does not say what x is, so these are checked by name.
A name inside `try:` (catching ImportError/AttributeError/Exception), under `if hasattr(...)`,
or read as getattr(torch..., 'name', default) is guarded: the code has a fallback for it,
so it need not exist in 2.11; so is a keyword that its file probes for by name
('isolate_recompiles' in inspect.signature(torch.compile).parameters). Only the names the
code needs unguarded are checked.

A use of something torch 2.11 lacks fails with the name and where it is used: give it a
fallback (hasattr / try), or, if 2.11 does have it and the list only lacks it (a module the
code did not touch before), regenerate the list under torch 2.11 with
    /work/venv211/bin/python tests/test_torch_api.py --write
(a venv with `pip install torch==2.11.0 numpy`; the command writes the list and prints what
the code uses that 2.11 lacks).
"""

import ast
import functools
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
LIST = Path(__file__).with_name('torch_2_11_api.txt')
CLASSES = {'torch.Tensor': torch.Tensor, 'torch.nn.Module': torch.nn.Module,
           'torch.optim.Optimizer': torch.optim.Optimizer}   # members checked by name alone
GUARDS = {'ImportError', 'ModuleNotFoundError', 'AttributeError', 'Exception', 'BaseException'}


def sources():
    """(where, python source) for the repository's code: *.py at the root and in lab/ (its tests aside, as the
    core's are: they run here), and the Python that lab/*.sh run (`python - <<'PY'` blocks and `python -c "..."`)."""
    for path in sorted(ROOT.glob('*.py')) + sorted(p for p in ROOT.glob('lab/**/*.py') if 'tests' not in p.parts):
        yield path.relative_to(ROOT).as_posix(), 0, path.read_text()
    for path in sorted(ROOT.glob('lab/**/*.sh')):
        text, rel = path.read_text(), path.relative_to(ROOT).as_posix()
        for m in re.finditer(r"python3? - <<'?(\w+)'?\n(.*?)\n\1\n", text, re.S):
            yield rel, text.count('\n', 0, m.start(2)), m.group(2)
        for m in re.finditer(r'python3? -c "([^"]*)"', text):
            yield rel, text.count('\n', 0, m.start(1)), m.group(1)


class Uses(ast.NodeVisitor):
    """What one file uses: torch names {name: (line, guarded)}, keywords passed to torch
    callables {(name, kw): (line, guarded)}, and attribute names read on anything else
    {attr: (line, guarded)} (for torch.Tensor.attr, ...)."""

    def __init__(self, tree):
        self.alias, self.names, self.kwargs, self.attrs, self.guarded = {}, {}, {}, {}, 0
        self.other = set()                   # names imported from elsewhere (re, np, ...): not tensors
        self.probed = set()                  # 'fused' in inspect.signature(...).parameters: a probed keyword
        for node in ast.walk(tree):          # imports first, wherever they are (some are in functions)
            if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                    and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                self.probed.add(node.left.value)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split('.')[0] == 'torch':
                        self.alias[a.asname or 'torch'] = a.name if a.asname else 'torch'
                    else:
                        self.other.add(a.asname or a.name.split('.')[0])
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if (node.module or '').split('.')[0] == 'torch' and not node.level:
                        self.alias[a.asname or a.name] = f'{node.module}.{a.name}'
                    else:
                        self.other.add(a.asname or a.name)
        self.visit(tree)

    def dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.alias:
            return '.'.join([self.alias[node.id]] + parts[::-1])
        return None

    def use(self, name, line, guarded=False, table=None):
        table = self.names if table is None else table
        old = table.get(name)
        if old is None or (old[1] and not (guarded or self.guarded)):   # an unguarded use wins
            table[name] = (line, bool(guarded or self.guarded))

    def visit_Import(self, node):
        for a in node.names:
            if a.name.startswith('torch.'):
                self.use(a.name, node.lineno)

    def visit_ImportFrom(self, node):
        if (node.module or '').split('.')[0] == 'torch' and not node.level:
            for a in node.names:
                self.use(f'{node.module}.{a.name}', node.lineno)

    def visit_Name(self, node):
        if node.id in self.alias and '.' in self.alias[node.id]:
            self.use(self.alias[node.id], node.lineno)

    def visit_Attribute(self, node):
        name = self.dotted(node)
        if name is not None:
            self.use(name, node.lineno)        # the longest chain; its prefixes resolve with it
            return
        if not (isinstance(node.value, ast.Name) and node.value.id in self.other):
            self.use(node.attr, node.lineno, table=self.attrs)
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        name = self.dotted(f) if isinstance(f, ast.Attribute) else (
            self.alias.get(f.id) if isinstance(f, ast.Name) else None)
        if name is not None:
            for kw in node.keywords:
                if kw.arg:
                    self.use((name, kw.arg), node.lineno, kw.arg in self.probed, self.kwargs)
        # getattr(torch.x, 'y', default) / hasattr(torch.x, 'y'): a guarded use of torch.x.y
        if isinstance(f, ast.Name) and f.id in ('getattr', 'hasattr') and len(node.args) >= 2:
            obj, attr = node.args[:2]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                base = self.dotted(obj) if isinstance(obj, ast.Attribute) else self.alias.get(getattr(obj, 'id', None))
                guarded = f.id == 'hasattr' or len(node.args) == 3
                if base:
                    self.use(f'{base}.{attr.value}', node.lineno, guarded)
                else:
                    self.use(attr.value, node.lineno, guarded, self.attrs)
        self.generic_visit(node)

    def visit_Try(self, node):
        caught = set()
        for h in node.handlers:
            for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]):
                caught.add(getattr(t, 'id', None) if t is not None else 'BaseException')
        self.guarded += bool(caught & GUARDS)
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= bool(caught & GUARDS)
        for part in node.handlers + node.orelse + node.finalbody:
            self.visit(part)

    def visit_If(self, node):                # if hasattr(...): ... and ... if hasattr(...) else ...
        checks = any(isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'hasattr' for n in ast.walk(node.test))
        self.visit(node.test)
        self.guarded += checks
        for stmt in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(stmt)
        self.guarded -= checks
        for stmt in node.orelse if isinstance(node.orelse, list) else [node.orelse]:
            self.visit(stmt)

    visit_IfExp = visit_If


@functools.lru_cache(maxsize=None)
def used():
    """What the code uses: names {name: [where, guarded]}, kwargs {(name, kw): [where, guarded]}
    and attrs {attr: [where, guarded]}, where = 'file:line' of a use (an unguarded one if any)."""
    tables = {}, {}, {}
    for rel, offset, text in sources():
        u = Uses(ast.parse(text, rel))
        for table, found in zip(tables, (u.names, u.kwargs, u.attrs)):
            for key, (line, guarded) in found.items():
                old = table.setdefault(key, [f'{rel}:{line + offset}', guarded])
                if old[1] and not guarded:       # guarded only if every use is
                    table[key] = [f'{rel}:{line + offset}', False]
    return tables


def resolve(name):
    """The object a dotted torch name names under the running torch; AttributeError if none."""
    parts = name.split('.')
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not inspect.ismodule(obj):
                raise
            try:
                obj = importlib.import_module('.'.join(parts[:i + 1]))
            except ImportError:
                raise AttributeError(name) from None
    return obj


def exists_here(name):
    """Whether name resolves under the running torch; a private module that nothing has imported
    yet (torch._dynamo: seconds to import) is only looked for on disk, not opened."""
    parts = name.split('.')
    try:
        for i in range(1, len(parts)):
            parent, part = resolve('.'.join(parts[:i])), parts[i]
            if inspect.ismodule(parent) and part.startswith('_') and part not in vars(parent) \
                    and '.'.join(parts[:i + 1]) not in sys.modules:
                path = Path(parent.__file__).parent / part
                return path.is_dir() or path.with_suffix('.py').is_file()
        resolve(name)
        return True
    except AttributeError:
        return False


def params(obj, short=None):
    """The parameter names a callable takes ('**' when any keyword goes), or None if unknown:
    from its signature, else from its docstring (torch's builtins: 'zeros(*size, *, out=None, ...)')."""
    try:
        sig = inspect.signature(obj)
        return sorted(p.name if p.kind != p.VAR_KEYWORD else '**' for p in sig.parameters.values()
                      if p.kind != p.VAR_POSITIONAL)
    except (TypeError, ValueError):
        pass
    doc, fns = getattr(obj, '__doc__', None) or '', {short, getattr(obj, '__name__', None)} - {None}
    if not fns or not isinstance(doc, str):      # short: the name it is reached by (torch.fft.rfft's
        return None                              # __name__ is fft_rfft; its docstring says rfft)
    found = set()
    for m in re.finditer(rf"(?:^|\n|:: )\s*(?:{'|'.join(map(re.escape, fns))})\(", doc):
        depth, i, arg = 1, m.end(), ''
        while i < len(doc) and depth:
            ch = doc[i]
            depth += (ch in '([{') - (ch in ')]}')
            if depth == 1 and ch == ',' or depth == 0:
                head = re.match(r'\s*(\*{0,2})(\w+)', arg)       # '*size' takes no keyword
                if head and head.group(1) != '*':
                    found.add('**' if head.group(1) else head.group(2))
                arg = ''
            else:
                arg += ch
            i += 1
    return sorted(found) or None


def method_names(attrs):
    """{torch.Tensor.x: where} etc. for each attribute name the code reads unguarded on a non-torch
    object that is a member of one of CLASSES under the running torch (not one of object's)."""
    out = {}
    for attr, (where, guarded) in attrs.items():
        for cname, cls in CLASSES.items():
            if not guarded and hasattr(cls, attr) and not hasattr(object, attr):
                out.setdefault(f'{cname}.{attr}', where)
    return out


def read_list():
    """{name: set of parameter names, or None for a non-callable or unknown} from the list."""
    api = {}
    for line in LIST.read_text().splitlines():
        if line.strip() and not line.startswith('#'):
            name, _, rest = line.partition('(')
            api[name.strip()] = set(rest.rstrip(')').split(', ')) if rest else None
    return api


def missing(api):
    """What the code needs (unguarded) that the list lacks: [(what, where)]."""
    names, kwargs, attrs = used()
    out = [(n, w) for n, (w, g) in sorted(names.items()) if not g and n not in api]
    out += [(n, w) for n, w in sorted(method_names(attrs).items()) if n not in api]
    for (n, kw), (w, g) in sorted(kwargs.items()):
        if not g and n in api and not (api[n] and (kw in api[n] or '**' in api[n])):
            out.append((f'{n}({kw}=)', w))
    return out


def test_list_is_sane():
    api = read_list()
    assert len(api) > 1000, f"{LIST.name} holds {len(api)} names"
    header = LIST.read_text().splitlines()[:8]
    assert any('torch 2.11' in h for h in header) and any('--write' in h for h in header), header
    for name in ('torch.zeros', 'torch.nn.functional.scaled_dot_product_attention', 'torch.nn.Linear',
                 'torch.optim.AdamW', 'torch.Tensor.masked_fill', 'torch.nn.Module.register_buffer'):
        assert name in api, name
    assert {'fused', 'weight_decay'} <= api['torch.optim.AdamW']
    assert {'is_causal', 'attn_mask'} <= api['torch.nn.functional.scaled_dot_product_attention']


def test_extraction_sees_the_code():
    """The walk finds what the code plainly uses (else the check below would check nothing)."""
    names, kwargs, attrs = used()
    assert len(names) > 50, sorted(names)
    for name in ('torch.nn.functional.scaled_dot_product_attention', 'torch.optim.AdamW', 'torch.compile'):
        assert name in names, name
    assert ('torch.optim.AdamW', 'betas') in kwargs
    assert 'torch.Tensor.masked_fill' in method_names(attrs)


def test_every_torch_api_used_exists_in_2_11():
    gaps = missing(read_list())
    assert not gaps, (
        "the code uses torch APIs that torch 2.11 (the GPU machine's torch) lacks, or that "
        f"tests/{LIST.name} does not list:\n" + ''.join(f"  {what}  used at {where}\n" for what, where in gaps)
        + "Give each a fallback (hasattr / try ... except AttributeError), or, if torch 2.11 does "
          "have it, regenerate the list under torch 2.11:\n"
          "  /work/venv211/bin/python tests/test_torch_api.py --write")


def test_every_torch_api_used_exists_here():
    """The same names, under the running torch (2.13 in CI): nothing the code needs is gone."""
    names, kwargs, _ = used()
    gone = [(name, where) for name, (where, guarded) in sorted(names.items()) if not guarded and not exists_here(name)]
    for (name, kw), (where, guarded) in sorted(kwargs.items()):
        if not guarded and exists_here(name):
            p = params(resolve(name), name.rsplit('.', 1)[-1])
            if p is not None and kw not in p and '**' not in p:
                gone.append((f'{name}({kw}=)', where))
    assert not gone, f"torch {torch.__version__} lacks: " + ', '.join(f'{w} at {x}' for w, x in gone)


def write():
    """Under torch 2.11: list the public members of every public torch module and class the code
    touches (torch.nn.functional, torch.Tensor, ...), and every name the code uses."""
    warnings.simplefilter('ignore')      # deprecation notes from reading every member
    names, kwargs, attrs = used()
    every = {n: w for n, (w, g) in names.items()}
    every.update(method_names(attrs))
    containers = set(CLASSES)
    for name, (where, guarded) in names.items():
        parts = name.split('.')
        for i in range(1, len(parts)):
            prefix = '.'.join(parts[:i])
            if guarded or any(p.startswith('_') for p in parts[1:i]):
                break                    # torch._dynamo's members are not an API to list
            try:
                obj = resolve(prefix)
            except AttributeError:
                break
            if inspect.ismodule(obj) or inspect.isclass(obj) and obj.__module__.startswith('torch'):
                containers.add(prefix)
    api = {}
    for prefix in sorted(containers):
        obj = resolve(prefix)
        api[prefix] = obj
        for member in dir(obj):
            try:
                value = getattr(obj, member)
            except Exception:            # a lazy member that fails to load is not there
                continue
            foreign = inspect.ismodule(value) and not value.__name__.startswith('torch') or \
                getattr(value, '__module__', None) in ('typing', 'typing_extensions', 'dataclasses')
            if not member.startswith('_') and not foreign:
                api[f'{prefix}.{member}'] = value
    for name in every:                    # private names the code uses, and deeper chains
        try:
            api[name] = resolve(name)
        except AttributeError:
            pass
    lines = []
    for name, obj in sorted(api.items()):
        p = params(obj, name.rsplit('.', 1)[-1]) if callable(obj) and not isinstance(obj, type(torch)) else None
        lines.append(f"{name}({', '.join(p)})" if p else name)
    LIST.write_text(
        f"# torch APIs as torch {torch.__version__} reports them (Python {sys.version.split()[0]}): the public\n"
        "# members of every torch module and class the repository's code touches, with each callable's\n"
        "# parameter names ('**': any keyword), and the private names the code uses. Read by\n"
        "# tests/test_torch_api.py (torch 2.11 is the GPU machine's torch; CI runs 2.13 and cannot\n"
        "# install 2.11). Regenerate under torch 2.11 (pip install torch==2.11.0 numpy) with:\n"
        "#   /work/venv211/bin/python tests/test_torch_api.py --write\n"
        + ''.join(line + '\n' for line in lines))
    print(f"wrote {len(lines)} names to {LIST} under torch {torch.__version__}")
    for what, where in missing(read_list()):
        print(f"  MISSING in torch {torch.__version__}: {what}  used at {where}")
    for name, (where, guarded) in sorted(names.items()):
        if guarded:
            print(f"  guarded ({'present' if name in api else 'absent'}): {name}  at {where}")
    for (name, kw), (where, guarded) in sorted(kwargs.items()):
        if guarded:
            p = params(api[name], name.rsplit('.', 1)[-1]) if name in api else None
            print(f"  guarded ({'present' if p and kw in p else 'absent'}): {name}({kw}=)  at {where}")


if __name__ == '__main__':
    if sys.argv[1:] != ['--write']:
        sys.exit("usage: python tests/test_torch_api.py --write   (under torch 2.11)")
    if not torch.__version__.startswith('2.11.'):
        sys.exit(f"this is torch {torch.__version__}: the list is of torch 2.11's API, so write it under 2.11")
    write()
