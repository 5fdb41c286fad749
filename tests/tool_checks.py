"""What the CPU tests of tools/*.py share (tests/peer_table_test.py, spec_chart_test.py, spec_margin_test.py): the
source tree, a tool loaded as a module, and check(), which prints each result and remembers the failures."""
import importlib.util
import os

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failures = []


def tool_path(name):
    """tools/NAME.py in the source tree."""
    return os.path.join(SRC, "tools", name + ".py")


def load_tool(name):
    """tools/NAME.py as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(name, tool_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
