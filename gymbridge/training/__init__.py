"""`hpcgym train`: the training loop (`trainer`) around the RL toolkit's algorithms and its
command (`command`). It lives on the bridge floor because each episode runs in a Gymnasium env
and training ends with a `hpcgym compare` evaluation."""
