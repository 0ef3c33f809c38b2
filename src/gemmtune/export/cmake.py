"""``CMakeLists.txt`` for an exported folder, and the arch-name translations it needs."""
from __future__ import annotations

from ..compiler import ARCHES
from ..errors import SpecError

CMAKE_MINIMUM = "3.25"  # CUDA_ARCHITECTURES learned the arch-specific '90a' form in 3.25

# NVRTC flags that mean the same to nvcc; others (NVRTC-only) are not passed on.
NVCC_COMPATIBLE_PREFIXES = ("--use_fast_math", "-use_fast_math", "--ftz", "--prec-div", "--prec-sqrt", "--fmad",
                            "-lineinfo", "--generate-line-info", "-D", "--define-macro")


def check_arch(arch: str) -> str:
    if arch not in ARCHES:
        raise SpecError(f"unknown arch '{arch}'; choose one of {', '.join(ARCHES)}")
    return arch


def cmake_architecture(arch: str) -> str:
    """'sm_90a' -> '90a', the value of CUDA_ARCHITECTURES."""
    return check_arch(arch).removeprefix("sm_")


def nvcc_arch_flag(arch: str) -> str:
    """nvcc's target flag: -arch=sm_90, or for an arch-specific target (sm_90a) exactly that SASS from
    compute_90a PTX (plain -arch=sm_90a also embeds compute_90 PTX, where wgmma/setmaxnreg do not exist)."""
    check_arch(arch)
    if arch.endswith("a"):
        number = arch.removeprefix("sm_")
        return f"-gencode=arch=compute_{number},code=sm_{number}"
    return f"-arch={arch}"


def nvcc_options(options: tuple[str, ...]) -> list[str]:
    """The kernel's NVRTC options that nvcc understands too (e.g. --use_fast_math)."""
    return [opt for opt in options if opt.startswith(NVCC_COMPATIBLE_PREFIXES)]


def _driver_link(name: str, driver_api: bool) -> str:
    if not driver_api:
        return ""
    return f"""# The launcher builds TMA descriptors with cuTensorMapEncodeTiled: a driver API call.
find_package(CUDAToolkit REQUIRED)
target_link_libraries({name}_check PRIVATE CUDA::cuda_driver)
"""


def cmake_text(name: str, arch: str, options: tuple[str, ...] = (), driver_api: bool = False) -> str:
    """CMakeLists.txt building ``<name>_check`` from main.cu for exactly `arch` (linking the driver
    library when the launcher calls the driver API)."""
    extra = ";".join(["-lineinfo", *nvcc_options(options)])
    return f"""# Written by gemmtune. Builds {name}_check, the self-checking benchmark of {name}.cuh.
#   cmake -B build && cmake --build build && ./build/{name}_check
# Without a system CUDA toolkit, point CMake at any nvcc: -DCMAKE_CUDA_COMPILER=/path/to/nvcc
cmake_minimum_required(VERSION {CMAKE_MINIMUM})
project({name} LANGUAGES CXX CUDA)

set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()

add_executable({name}_check main.cu)
# The kernel was tuned for {arch}; build SASS for exactly that GPU generation.
set_target_properties({name}_check PROPERTIES CUDA_ARCHITECTURES {cmake_architecture(arch)})
target_compile_options({name}_check PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:{extra}>")
{_driver_link(name, driver_api)}
# Other projects: add this folder with add_subdirectory() and link the header-only target.
add_library({name} INTERFACE)
target_include_directories({name} INTERFACE ${{CMAKE_CURRENT_SOURCE_DIR}})
{"target_link_libraries(" + name + " INTERFACE CUDA::cuda_driver)" + chr(10) if driver_api else ""}"""
