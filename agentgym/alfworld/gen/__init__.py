"""The ALFWorld game generator (internals of :mod:`agentgym.alfworld.generate`).

Modules, in pipeline order:

* :mod:`~agentgym.alfworld.gen.assets`       what the alfworld package ships (layouts, tables, goals)
* :mod:`~agentgym.alfworld.gen.scenes`       split scene lists, receptacle instances and poses
* :mod:`~agentgym.alfworld.gen.tasks`        task options per scene and object placement
* :mod:`~agentgym.alfworld.gen.walkthrough`  constructive expert commands
* :mod:`~agentgym.alfworld.gen.pddl`         PDDL problem text (mangled THOR ids)
* :mod:`~agentgym.alfworld.gen.game`         one game: config, files' content
* :mod:`~agentgym.alfworld.gen.verify`       one replay through the real TextWorld engine
* :mod:`~agentgym.alfworld.gen.store`        atomic writes in the official layout
"""
