"""The teaching half of the course: notebook content and the builder (`python -m course.build`)."""
