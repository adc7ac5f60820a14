"""Schedules: stages, relations, bound inference, schedule -> loop IR."""
