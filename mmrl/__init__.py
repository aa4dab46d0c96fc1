"""mmrl: reinforcement-learning post-training for vision-language models on images and video."""

__version__ = "0.1.0"
