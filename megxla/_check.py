"""``check_misc``: environment sanity checks (MegEngine runs its own at import: pip environment, Termux,
Windows DLLs). megxla's concerns differ: a real MegEngine installed next to the ``megengine`` import alias, and
JAX being able to start a backend."""
import warnings


def check_misc():
    """Check the environment megxla runs in; warn about what would surprise a MegEngine user.

    * a real ``megengine`` distribution is installed while megxla's ``megengine`` alias is active (imports of
      ``megengine`` then reach megxla, not that installation);
    * JAX cannot start any backend (every op would fail).

    Returns:
        the list of warning messages (also issued as ``RuntimeWarning``).

    Example:
        >>> isinstance(check_misc(), list)
        True
    """
    problems = []
    from . import _alias
    if _alias.is_installed():
        try:
            real = _alias._real_megengine()
        except Exception:  # a broken distribution: the alias answers anyway
            real = None
        if real:
            problems.append(f"a real MegEngine is installed ({real}) but `import megengine` resolves to megxla "
                            f"(megxla.as_megengine alias)")
    try:
        import jax
        jax.devices()
    except RuntimeError as exc:
        problems.append(f"JAX cannot start a backend: {exc}")
    for p in problems:
        warnings.warn(p, RuntimeWarning, stacklevel=2)
    return problems
