"""The gradient-flow dashboard: a TensorBoard plugin (entry-point group ``tensorboard_plugins``)
that shows, per run, heat maps of per-layer gradient norms, update-to-weight ratios and
dead-unit fractions over steps, read from the tags the built-in plugins write.

It depends only on the ``tensorboard`` package: ``metrics`` says which tags feed which heat map,
``layers`` puts the layers in model order, ``flow`` builds the bounded heat-map payload and
flags, and ``plugin`` serves them (and the static frontend) through TensorBoard's data provider.
"""
