"""A pytest plugin for the notebook runs (the Makefile's NBVAL loads it: -p tests.nbval_patience).

Once the kernel has replied that a cell finished, nbval waits for each of the cell's remaining
messages (its outputs, then the kernel's "idle") at most 5 seconds, a number it does not let us
set (nbval issues 136 and 231). On a loaded 2-core CI machine, two kernels training beside two
pytest workers, that is not always enough: stop 51's CI failed chapter 12's replay cell, which
had run to its end, with "Timeout of 5 seconds exceeded waiting for output", and xfailed the
22 cells after it. A kernel that really hangs is still caught: by --nbval-cell-timeout while a
cell runs, and by this longer wait after it.
"""
OUTPUT_WAIT = 120  # seconds for each message after the reply (nbval's own: 5)


def pytest_collection_modifyitems(items):
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            # nbval sets the attribute in IPyNbCell.__init__ and reads it after the reply; one
            # that no longer has it has changed how it waits, and this plugin must follow.
            if not hasattr(item, "output_timeout"):
                raise RuntimeError("nbval's cells no longer have `output_timeout`: update "
                                   "tests/nbval_patience.py to the installed nbval's way of waiting")
            item.output_timeout = OUTPUT_WAIT
