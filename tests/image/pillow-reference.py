#!/usr/bin/python3
# The image tests' independent reference (tests/image/*-test.cpp): makes test images with Pillow (and a
# small hand-written PNG encoder for what Pillow cannot write: 16-bit RGB, Adam7 interlacing), and writes
# what Pillow decodes them to, what Pillow's resize returns, and Kimi-VL's preprocessing recomputed in plain
# Python (no numpy). Usage: pillow-reference.py decode|resize|preprocess|seeds|bomb OUT_DIR
#
# Every case NAME writes OUT_DIR/NAME.in (encoded bytes or raw RGB) and OUT_DIR/NAME.out (expected raw RGB
# or float64 patches) and a line in OUT_DIR/cases.txt: "NAME WIDTH HEIGHT [extra fields]".
import io
import math
import random
import struct
import sys
import zlib

from PIL import Image, ImageOps

rng = random.Random(20240607)
out_dir = sys.argv[2]
manifest = []


def noise(mode, w, h):
    bands = {"RGB": 3, "RGBA": 4, "LA": 2, "L": 1, "P": 1, "CMYK": 4}[mode]
    return Image.frombytes(mode, (w, h), bytes(rng.randrange(256) for _ in range(w * h * bands)))


def smooth(w, h):
    # Gradients and a few edges: what photos look like to a JPEG encoder, unlike noise.
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 255) // max(1, w - 1), (y * 255) // max(1, h - 1), 255 if (x // 5 + y // 7) % 2 else 40)
                for y in range(h) for x in range(w)])
    return im


def put(name, data_in, data_out, *fields):
    with open(f"{out_dir}/{name}.in", "wb") as f:
        f.write(data_in)
    with open(f"{out_dir}/{name}.out", "wb") as f:
        f.write(data_out)
    manifest.append(" ".join([name] + [str(x) for x in fields]))


def round_half_up(x):
    return int(math.floor(x + 0.5))


def pillow_rgb(data):
    """What moxi's decode must return: Pillow's decode, EXIF orientation applied, alpha (including tRNS)
    composited onto white in float64."""
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
        rgba = im.convert("RGBA").tobytes()
        out = bytearray(len(rgba) // 4 * 3)
        for i in range(len(rgba) // 4):
            a = rgba[4 * i + 3]
            for c in range(3):
                out[3 * i + c] = round_half_up((a * rgba[4 * i + c] + (255 - a) * 255) / 255.0)
        return im.size, bytes(out)
    return im.size, im.convert("RGB").tobytes()


# A minimal PNG encoder for the layouts Pillow does not write. rows: list of lists of samples (ints) per
# row, already interleaved by channel.
def png_chunk(kind, body):
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def pack_row(samples, depth):
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    if depth == 8:
        return bytes(samples)
    per = 8 // depth
    out = bytearray()
    for i in range(0, len(samples), per):
        byte = 0
        for j in range(per):
            byte <<= depth
            if i + j < len(samples):
                byte |= samples[i + j]
        out.append(byte)
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def raw_png(w, h, color_type, depth, pixels, interlace=False):
    """pixels: list of h rows, each a list of w tuples of samples."""
    raw = bytearray()
    if not interlace:
        for row in pixels:
            raw += b"\0" + pack_row([s for px in row for s in px], depth)
    else:
        for x0, y0, dx, dy in ADAM7:
            cols = range(x0, w, dx)
            if not cols:
                continue
            for y in range(y0, h, dy):
                raw += b"\0" + pack_row([s for x in cols for s in pixels[y][x]], depth)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0)
    idat = zlib.compress(bytes(raw), 9)
    chunks = png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def rand_pixels(w, h, channels, maxval):
    return [[tuple(rng.randrange(maxval + 1) for _ in range(channels)) for _ in range(w)] for _ in range(h)]


def saved(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def decode_cases():
    w, h = 37, 23  # odd sides: partial MCUs, edge upsampling, partial Adam7 blocks
    pngs = {
        "png-rgb": saved(noise("RGB", w, h), "PNG"),
        "png-rgba": saved(noise("RGBA", w, h), "PNG"),
        "png-la": saved(noise("LA", w, h), "PNG"),
        "png-l": saved(noise("L", w, h), "PNG"),
        "png-1bit": saved(noise("L", w, h).convert("1"), "PNG"),
        "png-smooth": saved(smooth(64, 48), "PNG", optimize=True),
    }
    p = noise("P", w, h)
    p.putpalette(bytes(rng.randrange(256) for _ in range(768)))
    pngs["png-p"] = saved(p, "PNG")
    pngs["png-p-trns"] = saved(p, "PNG", transparency=bytes(rng.randrange(256) for _ in range(200)))
    p4 = Image.frombytes("P", (w, h), bytes(rng.randrange(16) for _ in range(w * h)))
    p4.putpalette(bytes(rng.randrange(256) for _ in range(48)))
    pngs["png-p-4bit"] = saved(p4, "PNG", bits=4)
    lt = noise("L", w, h)
    pngs["png-l-trns"] = saved(lt, "PNG", transparency=lt.getpixel((3, 4)))
    rt = noise("RGB", w, h)
    rt.putpixel((5, 5), rt.getpixel((1, 2)))
    pngs["png-rgb-trns"] = saved(rt, "PNG", transparency=rt.getpixel((1, 2)))
    # Hand-encoded: 16-bit RGB and RGBA (Pillow keeps the high byte), Adam7 in several layouts, a 1 x 1.
    pngs["png-rgb16"] = raw_png(w, h, 2, 16, rand_pixels(w, h, 3, 65535))
    pngs["png-rgba16"] = raw_png(w, h, 6, 16, rand_pixels(w, h, 4, 65535))
    pngs["png-interlaced-rgb"] = raw_png(w, h, 2, 8, rand_pixels(w, h, 3, 255), interlace=True)
    pngs["png-interlaced-rgba"] = raw_png(w, h, 6, 8, rand_pixels(w, h, 4, 255), interlace=True)
    pngs["png-interlaced-small"] = raw_png(3, 2, 2, 8, rand_pixels(3, 2, 3, 255), interlace=True)
    pngs["png-interlaced-rgb16"] = raw_png(13, 9, 2, 16, rand_pixels(13, 9, 3, 65535), interlace=True)
    pngs["png-1x1"] = raw_png(1, 1, 2, 8, [[(10, 200, 30)]])
    for name, data in pngs.items():
        (W, H), rgb = pillow_rgb(data)
        put(name, data, rgb, W, H)

    # Cut to the high byte directly: Pillow opens 16-bit grayscale as mode "I" and converting that to RGB
    # clips at 255 instead, which moxi does not copy (docs/vision.md).
    gray16 = rand_pixels(w, h, 1, 65535)
    rgb = bytes(v[0] >> 8 for row in gray16 for v in row for _ in range(3))
    put("png-gray16", raw_png(w, h, 0, 16, gray16), rgb, w, h)
    gray2 = rand_pixels(w, h, 1, 3)
    rgb = bytes(v[0] * 85 for row in gray2 for v in row for _ in range(3))
    put("png-gray2", raw_png(w, h, 0, 2, gray2), rgb, w, h)

    jpegs = {
        "jpeg-420": saved(noise("RGB", w, h), "JPEG", quality=90, subsampling=2),
        "jpeg-422": saved(noise("RGB", w, h), "JPEG", quality=90, subsampling=1),
        "jpeg-444": saved(noise("RGB", w, h), "JPEG", quality=90, subsampling=0),
        "jpeg-progressive": saved(smooth(61, 45), "JPEG", quality=85, progressive=True),
        "jpeg-optimized": saved(smooth(40, 40), "JPEG", quality=75, optimize=True),
        "jpeg-gray": saved(noise("L", w, h), "JPEG", quality=90),
        "jpeg-cmyk": saved(noise("CMYK", w, h), "JPEG", quality=90),
        "jpeg-smooth-420": saved(smooth(64, 48), "JPEG", quality=50),
    }
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        jpegs[f"jpeg-exif-{o}"] = saved(smooth(20, 12), "JPEG", quality=95, exif=exif.tobytes())
    for name, data in jpegs.items():
        (W, H), rgb = pillow_rgb(data)
        put(name, data, rgb, W, H)


def resize_cases():
    sources = {"noise": noise("RGB", 50, 37), "smooth": smooth(64, 48), "wide": noise("RGB", 300, 11)}
    targets = {
        "noise": [(25, 18), (10, 7), (1, 1), (100, 74), (51, 37), (50, 38), (17, 13), (49, 36), (200, 3),
                  (3, 200), (2, 2), (500, 9)],
        "smooth": [(32, 24), (128, 96), (13, 101), (63, 47), (65, 49), (7, 5)],
        "wide": [(12, 11), (7, 40), (1000, 3), (299, 12)],
    }
    for src_name, im in sources.items():
        for (W, H) in targets[src_name]:
            want = im.resize((W, H), Image.BICUBIC).tobytes()
            put(f"{src_name}-{W}x{H}", im.tobytes(), want, im.size[0], im.size[1], W, H)


MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


def kimi_vl(im, patch, merge, limit):
    """KimiVLImageProcessor (pad_input=False) with moxi's upscale of small images, in plain Python."""
    unit = patch * merge
    w, h = im.size
    if w < unit or h < unit:
        if w <= h:
            size = (unit, max(unit, (2 * h * unit + w) // (2 * w)))
        else:
            size = (max(unit, (2 * w * unit + h) // (2 * h)), unit)
        im = im.resize(size, Image.BICUBIC)
        w, h = im.size
    if (w // patch) * (h // patch) > limit:
        scale = math.sqrt(limit / ((w // patch) * (h // patch)))
        im = im.resize((int(w * scale), int(h * scale)), Image.BICUBIC)
        w, h = im.size
    cw, ch = w - w % unit, h - h % unit
    left, top = (w - cw) // 2, (h - ch) // 2
    im = im.crop((left, top, left + cw, top + ch))
    assert cw // patch < 512 and ch // patch < 512
    px = im.tobytes()
    table = [[(v / 255.0 - MEAN[c]) / STD[c] for v in range(256)] for c in range(3)]
    out = []
    for gr in range(ch // patch):
        for gc in range(cw // patch):
            for c in range(3):
                t = table[c]
                for y in range(patch):
                    base = ((gr * patch + y) * cw + gc * patch) * 3 + c
                    out.extend(t[px[base + 3 * x]] for x in range(patch))
    return ch // patch, cw // patch, struct.pack(f"<{len(out)}d", *out)


def preprocess_cases():
    cases = [("default-crop", noise("RGB", 500, 450), 14, 2, 4096),
             ("default-downscale", smooth(920, 900), 14, 2, 4096),
             ("limit-64", noise("RGB", 300, 200), 14, 2, 64),
             ("upscale-narrow", noise("RGB", 20, 50), 14, 2, 4096),
             ("upscale-tiny", noise("RGB", 5, 3), 14, 2, 4096),
             ("upscale-square", noise("RGB", 9, 9), 14, 2, 4096),
             ("exact", noise("RGB", 28, 28), 14, 2, 4096),
             ("odd", noise("RGB", 100, 61), 14, 2, 4096),
             ("patch16-merge1", noise("RGB", 70, 45), 16, 1, 4096)]
    for name, im, patch, merge, limit in cases:
        gh, gw, data = kimi_vl(im, patch, merge, limit)
        put(name, im.tobytes(), data, im.size[0], im.size[1], patch, merge, limit, gh, gw)


def seed_cases():
    # Valid files for the hostile-input and fuzz tests.
    seeds = {
        "seed-png-rgb": saved(noise("RGB", 16, 12), "PNG"),
        "seed-png-rgba-interlaced": raw_png(11, 9, 6, 8, rand_pixels(11, 9, 4, 255), interlace=True),
        "seed-png-palette": saved(noise("P", 16, 12), "PNG", transparency=b"\x00\x80"),
        "seed-png-gray16": raw_png(9, 7, 0, 16, rand_pixels(9, 7, 1, 65535)),
        "seed-jpeg-baseline": saved(smooth(16, 12), "JPEG", quality=80),
        "seed-jpeg-progressive": saved(smooth(24, 16), "JPEG", quality=80, progressive=True),
        "seed-jpeg-gray": saved(noise("L", 16, 8), "JPEG", quality=80),
        "seed-jpeg-gray-progressive": saved(noise("L", 16, 16), "JPEG", quality=80, progressive=True),
    }
    exif = Image.Exif()
    exif[0x0112] = 6
    seeds["seed-jpeg-exif"] = saved(smooth(16, 12), "JPEG", quality=80, exif=exif.tobytes())
    seeds["seed-jpeg-large"] = saved(smooth(256, 192), "JPEG", quality=90)
    for name, data in seeds.items():
        put(name, data, b"", 0, 0)


def bomb_cases():
    # A decompression bomb: 9000 x 9000 zeros, about 80 KB of PNG that would inflate to 81 M pixels.
    put("bomb-png", saved(Image.new("L", (9000, 9000)), "PNG", compress_level=9), b"", 9000, 9000)


modes = {"decode": decode_cases, "resize": resize_cases, "preprocess": preprocess_cases, "seeds": seed_cases,
         "bomb": bomb_cases}
modes[sys.argv[1]]()
with open(f"{out_dir}/cases.txt", "w") as f:
    f.write("\n".join(manifest) + "\n")
