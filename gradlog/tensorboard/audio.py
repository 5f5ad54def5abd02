"""``add_audio``'s encoding, as PyTorch writes it: a mono 16-bit PCM WAV (by the standard
library's ``wave``) in a legacy ``Summary.Audio``, which the Audio dashboard plays.

Samples are floats in ``[-1, 1]``; louder ones are clipped (with a warning) and all are scaled
by 32767 and truncated to int16 in the input's precision, so float32 and float64 clips give the
same bytes as PyTorch (float16 is widened first: PyTorch's float16 product overflows at 1.0).
"""

from __future__ import annotations

import io
import warnings
import wave

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

__all__ = ["wav_bytes", "audio_summary"]


def wav_bytes(samples: np.ndarray, sample_rate: float) -> bytes:
    """A WAV file of mono int16 ``samples`` (a fractional rate is rounded, by ``wave``)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(np.ascontiguousarray(samples, dtype="<i2").tobytes())
    return buffer.getvalue()


def audio_summary(tag: str, snd_tensor, sample_rate: int = 44100) -> Summary:
    """One clip: ``snd_tensor`` of shape ``(L,)`` or ``(1, L)``, values in ``[-1, 1]``."""
    array = np.asarray(snd_tensor)
    clip = array.squeeze()
    if clip.ndim != 1 or clip.size == 0:
        raise ValueError(f"add_audio: expected one non-empty channel, shape (L,) or (1, L), "
                         f"got shape {tuple(array.shape)}")
    if not round(sample_rate) >= 1:  # the WAV header holds it rounded to an integer
        raise ValueError(f"add_audio: sample_rate must be at least 1 once rounded, got "
                         f"{sample_rate}")
    if clip.dtype not in (np.float32, np.float64):  # float16 would overflow at 1.0 * 32767
        clip = clip.astype(np.float32)
    clip = np.nan_to_num(clip, nan=0.0, posinf=1.0, neginf=-1.0)
    if np.abs(clip).max() > 1:
        warnings.warn(f"add_audio({tag!r}): amplitudes outside [-1, 1] are clipped",
                      UserWarning, stacklevel=3)
        clip = clip.clip(-1, 1)
    samples = (clip * np.iinfo(np.int16).max).astype("<i2")
    audio = Summary.Audio(sample_rate=sample_rate, num_channels=1, length_frames=samples.size,
                          encoded_audio_string=wav_bytes(samples, sample_rate),
                          content_type="audio/wav")
    return Summary(value=[Summary.Value(tag=tag, audio=audio)])
