"""Solving prompts: the async work shared by the trigger and the non-deferrable operator."""
