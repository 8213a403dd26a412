"""The lab's tests (python -m pytest lab/tests), apart from the core's in tests/: a package, so that its
modules and conftest are lab.tests.* and never taken for the core's test modules of the same name."""
