"""From a process's series of reports to answers: trends per stack, the
leak-suspect ranking and its verdicts (trends.py), readable frames
(names.py).  Pure functions: tested without a process."""
