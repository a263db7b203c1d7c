"""Suite-wide pytest settings: say the random order's seed, whatever the verbosity.

pytest-randomly shuffles the tests (and reseeds ``random``, numpy and Faker) with a seed it
prints only in the report header, which ``-q`` hides; a leak between tests then shows as a
failure nobody can reproduce. This prints ``--randomly-seed=N`` on the first line instead.
"""


def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, "workerinput"):          # an xdist worker: the controller says it
        return
    seed = getattr(config.option, "randomly_seed", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and isinstance(seed, int):
        reporter.write_line(f"tests in random order: rerun this order with -p randomly "
                            f"--randomly-seed={seed}")
