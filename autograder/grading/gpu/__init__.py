"""The GPU stage (part long_sequence_gpu of self_attention), graded on a CUDA device.

config.py: sizes, budgets and the messages about memory; reference.py: seeded inputs, the
sampled rows and their exact values, the diagnosis of a wrong output; stage.py: one
submission through the stage (the checks are autograder/checks/self_attention/
test_long_sequence_gpu.py); `grade-gpu`, a whole course into its gradebook, is a command
(autograder/commands/gpucourse.py);
known_submissions.py: the reference and broken variants the device script and tests grade.
"""
