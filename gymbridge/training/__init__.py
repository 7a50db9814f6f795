"""`hpcgym train` on the bridge floor: its episodes run in Gymnasium envs, and it ends with a
`hpcgym compare` evaluation."""
