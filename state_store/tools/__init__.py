"""What people run by hand, beside savepoint/ and results/: `state-store inspect`'s report
(inspect.py), the demo query (demo.py), and the progress bar of long copies (progress.py)."""
