"""The ``ampkit train`` job: the built-in GPT trained on a byte corpus, with a run folder.

Modules: :mod:`~ampkit.job.config` (``TrainConfig``, importable without torch),
:mod:`~ampkit.job.job` (``train``, ``TrainSummary``), :mod:`~ampkit.job.run_folder` (what
``--out`` holds) and :mod:`~ampkit.job.resume` (the settings a resume compares and carries).
The model itself is :mod:`~ampkit.models.gpt`. ``ampkit.train``, ``ampkit.TrainConfig`` and
``ampkit.TrainSummary`` re-export the job's public names.
"""
