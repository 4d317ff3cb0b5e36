"""Figures the console computes or draws: the arithmetic a config writes where a number is
needed, a metric's curve over a whole run, the evaluate report's acceptance."""
