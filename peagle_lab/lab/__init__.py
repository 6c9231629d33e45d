"""The teaching code: what the notebooks, the workshop and the figures use, beside the library.

| module              | what it holds                                                        |
| ------------------- | -------------------------------------------------------------------- |
| ``layout``          | the draft batch laid out by hand, toy batches, kernel parity, timing |
| ``walkthrough``     | one decode step taken apart with :mod:`peagle_lab.step`               |
| ``train_walkthrough`` | the small training experiments of notebooks 3 and 6                |
| ``exercises``       | the workshop exercises' solutions                                    |
| ``checks``          | the exercise cells' checks: a hint until the answer is right         |
| ``student_copies``  | student copies and solutions notebooks built from the notebooks      |
| ``figures``         | plotly figures, each a pure function of a result object              |
| ``widgets``         | ipywidgets built from those figures                                  |
| ``static``          | PNG copies of the committed notebooks' figures (no-JavaScript views)  |
| ``kmodel``          | the analytic model of throughput against K, fitted to a K sweep      |
| ``paper``           | the paper's published figures beside ours (notebook 5, docs/paper.md) |
| ``mechanics``       | masks, memory arithmetic, KV writes and slot inputs, computed live   |
| ``mechanics_figures`` | the figures of ``kmodel`` and ``mechanics``                        |

Nothing in the library imports this package; ``import-linter`` keeps it that way.
"""
