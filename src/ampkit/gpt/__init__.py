"""The built-in GPT and the ``ampkit train`` job that trains it.

Modules: :mod:`~ampkit.models.gpt` (``GPT``, ``GPTConfig``), :mod:`~ampkit.models.corpus` (the
byte-level corpus and batch windows), :mod:`~ampkit.gpt.config` (``TrainConfig``, importable
without torch) and :mod:`~ampkit.gpt.job` (``train``, ``TrainSummary``). ``ampkit.train``,
``ampkit.TrainConfig`` and ``ampkit.TrainSummary`` re-export the job's public names.
"""
