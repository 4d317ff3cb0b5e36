"""What an operator reads and types, one definition each: the errors (one line naming where and
what to do), text made safe to print, secrets redacted from what is written, durations and rates
as words."""
