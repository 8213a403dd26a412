"""The lab's tests use the core's fixtures (tests/conftest.py): the corpus and its char-level data, the
forked command runner, one thread for tiny models, the results folder moved, and the check that no test
leaves torch._dynamo.config changed (autouse). Only fixtures are taken: the core's hooks (the device
under test, SPECTRAL_TEST_SHARD) are for the core's suite, and registered twice they would act twice."""

from tests.conftest import (cli, data_dir, dynamo_config_kept, gpt2_cache, move_results,  # noqa: F401
                            one_thread, shakespeare, sources)
