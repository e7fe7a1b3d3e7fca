"""A Program as straight-line Python: one generated function per Executor.

Registers become local variables, each instruction one line calling its
bound kernel, each free a ``del``.  That removes the interpreter loop's
per-instruction work (fetching the step, building the argument list,
indexing the register file), which on small models costs as much as the
arithmetic.  Used for plain runs; tracing, NaN checks and memory tracking
keep the step-by-step loop.
"""
from .program import NO_REGISTER


class StraightLineRun:
    """``run(inputs)`` returns the outputs as a list; it empties ``inputs``
    (a list in declaration order) first.  ``step_at(traceback)``
    finds the step that raised, and ``registers_at(traceback)`` the register
    values at that moment, for the error message.

    ``program`` must have passed validate_program: its register numbers are
    written into the generated source."""

    def __init__(self, program, steps, constants, xp, single_output, call_general):
        env = {'_xp': xp, '_array': xp.ndarray, '_single': single_output}
        params = ['r%d' % v.register for v in program.inputs]
        # The inputs come as a list the run empties: its locals then hold
        # the only references, and a ``del`` frees an input at its last read.
        lines = ['def run(_inputs):']
        if params:
            lines.append('    %s, = _inputs' % ', '.join(params))
        lines.append('    _inputs.clear()')
        self._line_step = {}
        self._constants = constants
        for reg, value in constants.items():
            env['r%d' % reg] = value  # read as globals: never assigned in run
        for step in steps:
            args = ', '.join('None' if r == NO_REGISTER else 'r%d' % r for r in step.inputs)
            self._line_step[len(lines) + 1] = step  # code lines count from 1
            if step.simple:
                # The kernel called directly, its attributes as keywords: a
                # functools.partial with keywords costs four times as much.
                env['k%d' % step.index] = step.kernel
                for name, value in step.static.items():
                    env['a%d_%s' % (step.index, name)] = value
                call = ', '.join(['_xp'] + ([args] if args else []) + [
                    '%s=a%d_%s' % (name, step.index, name) for name in step.static])
                out = 'r%d' % step.outputs[0]
                lines.append('    %s = k%d(%s)' % (out, step.index, call))
                lines.append('    if type(%s) is not _array: %s = _single(%s)' % (out, out, out))
            else:
                env['k%d' % step.index] = _general(call_general, step)
                captured = ', '.join('r%d' % r for r in step.captures)
                targets = ''.join('_, ' if r == NO_REGISTER else 'r%d, ' % r
                                  for r in step.outputs)
                lines.append('    %s= k%d([%s], [%s])' % (targets or '_ ', step.index, args,
                                                         captured))
            for r in step.frees:
                if r not in constants:
                    lines.append('    del r%d' % r)
        lines.append('    return [%s]' % ', '.join('r%d' % v.register for v in program.outputs))
        source = '\n'.join(lines) + '\n'
        self.code = compile(source, '<program %s>' % program.name, 'exec')
        exec(self.code, env)  # noqa: S102 (our own generated source)
        self.run = env['run']
        self._run_code = self.run.__code__

    def _frame(self, traceback):
        while traceback is not None:
            if traceback.tb_frame.f_code is self._run_code:
                return traceback
            traceback = traceback.tb_next
        return None

    def step_at(self, traceback):
        tb = self._frame(traceback)
        return None if tb is None else self._line_step.get(tb.tb_lineno)

    def registers_at(self, traceback):
        """{register: value} when ``traceback`` was raised, constants included."""
        tb = self._frame(traceback)
        if tb is None:
            return {}
        registers = dict(self._constants)  # globals of run, not in its frame
        registers.update((int(name[1:]), value) for name, value in tb.tb_frame.f_locals.items()
                         if name.startswith('r'))  # not '_', the unused outputs
        return registers


def _general(call_general, step):
    """Steps with several outputs or sub-programs go through the Executor's
    general call, which returns one value per output."""
    def call(args, captured):
        return call_general(step, args, captured)
    return call
