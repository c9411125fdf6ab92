"""Models by name: the one ``--model`` resolver every command uses.

* :mod:`~ampkit.models.resolve`: ``gpt``, ``convnet``, ``hf:<name>``, ``timm:<name>`` or a
  ``package.module:factory`` to a :class:`~ampkit.models.resolve.BuiltModel` (model,
  example batch, loss);
* :mod:`~ampkit.models.library`: Hugging Face and timm models built from their configs;
* :mod:`~ampkit.models.gpt`: the built-in GPT; :mod:`~ampkit.models.corpus`: its byte corpus.
"""
