"""The built-in models' names, apart from the models themselves: the tasks and the command line list them at
start-up, and importing Flax (what the models are written in) takes a third of a second that a task without a
neural model never needs."""

from typing import Literal

__all__ = ["BAG_OF_WORDS_MODELS", "MODELS", "ModelName", "SEQUENCE_MODELS"]

MODELS = ("mlp", "cnn", "leaf-cnn", "lenet5", "vgg8", "vgg16", "resnet9")  # the image models (models.zoo)
ModelName = Literal[MODELS]
SEQUENCE_MODELS = ("char-lstm",)  # models.sequence
BAG_OF_WORDS_MODELS = ("bow-logistic",)  # models.bag_of_words
