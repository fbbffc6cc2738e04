"""Roles floor, measuring side: load, check and time built candidates on a GPU.

Torch and the standard library only (an import contract in the tests holds it so): this
folder runs on GPU machines that have neither the DSL nor the search stack.

The searching process's side (standard library only; it never touches the GPU):

- ``measure``: a measurer by isolation (``open_measurer``), or a list at once (``measure_artifacts``);
- ``measurer``: the Measurer interface, MeasureError, Probe, MeasureStats;
- ``worker_measurer`` / ``process_measurer``: persistent measuring children / a child per candidate;
- ``watchdog``: one child under phase deadlines, killed with its process group;
- ``limits``: the deadlines; ``outcomes``: what a child did -> a Measurement status;
- ``protocol``: the report and command pipes between the two sides;
- ``bundle_measure``: a bundle's candidates into its results.json; ``machine``: is there a GPU;
- ``gpus``: which GPUs measure (``--gpus N|all``; torch imported only to count them).

The measuring child's side (torch):

- ``runner``: the command line (``python -m tsopt.workers.runner --child ...``);
- ``measuring_worker``: the persistent child; ``candidate``: check and time one artifact;
- ``reference``: per op, the inputs, the torch reference check and the vendor baseline;
- ``buffers``: the rotated buffer sets; ``session``: the stream and CUDA-event timing;
- ``device``: this process's GPU (the seam a simulated device replaces); ``faults``: CUDA
  errors -> statuses; ``loader``: a kernel's library (copied verbatim into exports).

An export's PyTorch side (torch; copied verbatim into exports beside ``loader``):

- ``torch_ops``: the kernels as ``torch.ops.tsopt.*`` ops, and a dispatch table per op.
"""
