"""How each engine starts the ranks of ``gradlog train --nproc N`` on this machine (asked
through ``Engine.run_ranks``): ``mpi`` (gradlog's own models, mpich's process manager) and
``torchrun`` (PyTorch models, torch's own launcher). Not engines: ``engine_classes`` skips this
package."""
