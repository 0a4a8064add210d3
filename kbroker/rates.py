"""Kafka's rate over sampled windows (`Rate` of a `SampledStat`) and the throttle time that
brings an observed rate back to its bound: what client quotas and the connection creation rate
limit measure with; and Kafka's `TokenBucket`, which the controller mutation quota measures
with. Time is passed in (monotonic milliseconds), so the arithmetic is tested without waiting."""

from __future__ import annotations


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms


class Rate:
    """Kafka's `Rate(SampledTotal)`: the sum of values in the retained samples over the time they
    span, at least `samples - 1` whole windows (so one early burst is not a huge rate)."""

    __slots__ = ("_current", "_samples", "last_record_ms", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            # The new window starts on the grid of the last one (Kafka's SampledStat.record).
            end = sample.start_ms + self.window_ms
            sample = self._advance(now_ms - (now_ms - end) % self.window_ms)
        sample.value += value
        self.last_record_ms = now_ms

    def record_over(self, value: float, bound: float, now_ms: int, max_throttle_ms: int | None = None) -> int:
        """Record `value` and return the throttle time (ms) that brings the rate back to
        `bound`, at most `max_throttle_ms` when given; 0 while the rate is within it (Kafka's
        Sensor.record with a quota, and the throttle time of its QuotaViolationException)."""
        self.record(value, now_ms)
        observed = self.measure(now_ms)
        if observed <= bound:
            return 0
        throttle = throttle_time_ms(observed, bound, self.window_size(now_ms))
        return throttle if max_throttle_ms is None else min(throttle, max_throttle_ms)

    def measure(self, now_ms: int) -> float:
        """Bytes (or units) per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size(now_ms) / 1000.0)

    def window_size(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the time since the oldest sample began, at least
        `samples - 1` whole windows."""
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self._samples)
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return elapsed

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, start_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current >= len(self._samples):
            sample = _Sample(start_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(start_ms)
        return sample

    def _purge(self, now_ms: int) -> None:
        """Samples older than all the windows together count for nothing (reset to now)."""
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire:
                sample.reset(now_ms)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """Kafka's ClientQuotaManager.throttleTime: the delay X that brings the observed rate O back to
    the quota T over the window W, O * W / (W + X) = T, so X = (O - T) / T * W (rounded)."""
    return int(round((observed - bound) / bound * window_ms))


class TokenBucket:
    """Kafka's `TokenBucket` stat (KIP-599): credits refilled at `quota` per second up to a burst
    of `samples * window * quota`, each recorded value taken out (the credits may go below zero);
    the quota is exhausted while they are below zero. Kafka's bucket starts empty at time 0 and
    is refilled to the brim on first use; this one starts full. The quota and burst are passed
    at each call, so a changed quota applies at once to the credits held (Kafka updates the
    metric's config in place)."""

    __slots__ = ("_tokens", "_updated_ms", "last_record_ms")

    def __init__(self) -> None:
        self._tokens: float | None = None  # None: full
        self._updated_ms = 0
        self.last_record_ms = 0

    def measure(self, quota: float, burst: float, now_ms: int) -> float:
        """The credits left at `now_ms`."""
        return self._refill(quota, burst, now_ms)

    def record(self, value: float, quota: float, burst: float, now_ms: int) -> None:
        self._tokens = min(burst, self._refill(quota, burst, now_ms) - value)
        self.last_record_ms = now_ms

    def _refill(self, quota: float, burst: float, now_ms: int) -> float:
        if self._tokens is None:
            tokens = burst
        else:
            tokens = min(burst, self._tokens + quota * (now_ms - self._updated_ms) / 1000.0)
        self._tokens = tokens
        self._updated_ms = now_ms
        return tokens
