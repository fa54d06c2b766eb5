"""Device meshes (`mesh`), logical-axis sharding rules (`rules`), the RL stage's array placement (`layout`) and
multi-host start-up (`distributed`)."""
