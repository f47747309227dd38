"""The metrics (Faithfulness, Bias, Topic Adherence, G-Eval for criteria of your own), the
engine they share, judged metrics of an agent's trajectory (Task Completion, Tool and Argument
Correctness, Step Efficiency, Plan Adherence and Quality, Goal Accuracy) and deterministic
checks of it (no judge)."""
