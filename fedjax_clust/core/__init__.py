"""The shared vocabulary of every layer above: the batched client state, the algorithm type, client data
batches and padding masks, the client optimiser, pytree helpers and argument checks. Imports nothing else
of the package."""
