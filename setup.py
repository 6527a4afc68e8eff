from setuptools import find_packages, setup

setup(
    name="jtmini",
    version="0.1.0",
    description="A small JIT-compiled deep-learning operator framework in the style of Jittor",
    packages=find_packages(include=["jtmini", "jtmini.*"]),
    package_data={"jtmini": ["templates/*/*.j2", "__init__.pyi", "py.typed"]},
    python_requires=">=3.9",
    install_requires=["numpy", "jinja2", "mpi4py", "tqdm", "threadpoolctl", "einops"],
    extras_require={"cuda": ["cupy-cuda12x"], "mkl": ["mkl"], "image": ["Pillow"], "test": ["pytest", "pytest-timeout", "Pillow", "scipy", "autograd", "nvidia-cuda-nvrtc>=12"]},
)
