"""Speak the frameworks' language: read a verl trainer config or an OpenRLHF command line as oppo-sim's
own options (``oppo-sim run --from-verl``, ``--from-openrlhf``), and write a plan's chosen configuration
back as that framework's settings (``oppo-sim plan --export verl|openrlhf``).

Modules: ``translation`` (what the readers share), ``verl``, ``openrlhf`` (the readers), ``export`` (the
writers), ``framework_args`` (the command line), ``stages`` (a simulated run's steps in each framework's own
stage timers). Nothing is imported here: importing the package has no
side effects."""
