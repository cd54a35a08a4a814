"""`swiftdoc attach`: find a running ms-swift job, follow its logs, sample its GPUs, diagnose it live.

Modules (data sources apart from the view):
  target.py   PID | OUTPUT_DIR | LOG -> Target (processes, output/run dir, logs, GPUs)
  follow.py   LogFollower: growth, truncation, rotation, deletion; cheap scan of new bytes
  session.py  AttachSession: follower + sampler + host monitor -> Snapshot (+ alerts)
  view.py     rich rendering of a Snapshot (live and --once)
Read-only by construction: nothing here sends a signal or writes into the job's
process; the only file written is the samples file.
"""
