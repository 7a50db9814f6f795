"""`hpcgym train` on the bridge floor: episodes in Gymnasium envs, ending with a `hpcgym compare` evaluation."""
