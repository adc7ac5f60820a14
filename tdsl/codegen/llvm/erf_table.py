"""float32 erf of a 16-lane AVX-512 vector as one polynomial per lane, its coefficients
looked up by interval (`vpermps` from 16-entry tables held in registers), instead of two
polynomials and an exp evaluated for every lane and blended (`intrinsics._erf_f32`, which
serves scalars and narrower vectors). About half the vector instructions: an exact GELU epilogue
costs a conv or matmul tile that much less.

|x| is clamped to [0, 3.999] (erf(3.999) rounds to 1 in float32) and cut into 16 intervals
of width 1/4; interval i > 0 holds a degree-6 polynomial in r = |x| - (i + 1/2)/4, and
interval 0 one in r = |x| whose constant term is 0 and whose result is r + r * q(r), so
that the exact r dominates near 0 and erf keeps full relative precision down to
denormals. Coefficients: relative-error minimax fits (Lawson-weighted least squares in
float64); the leading three are rounded to float32 one at a time and the rest refitted to
what the rounding left (rounded alone, erf(3.875)'s constant term cost 0.4 ulp). Measured
over every 5th float32 in [2^-30, 5], float32 arithmetic: under 0.98 ulp from the exact
erf, so always one of its two float32 neighbours (the blended form: 2 ulp).
"""
from __future__ import annotations

from llvmlite import ir

from .types import I32

_WIDTH = 0.25
_CLAMP = 3.999
_CENTRES = (0.0,) + tuple((i + 0.5) * _WIDTH for i in range(1, 16))
# interval 0 adds r itself (the 1 of its linear coefficient, taken out of the table)
_IDENTITY = (1.0,) + (0.0,) * 15
# _COEFFS[k][i]: coefficient of r^k in interval i
_COEFFS = (
    (0.0, 0.4041168987751007, 0.6232408881187439, 0.7840750813484192, 0.8883882164955139,
     0.9481700658798218, 0.9784437417984009, 0.9919900298118591, 0.9973459839820862,
     0.9992170333862305, 0.999794602394104, 0.9999521374702454, 0.9999901056289673,
     0.9999982118606567, 0.9999997019767761, 0.9999999403953552),
    (0.12837916612625122, 0.9803527593612671, 0.7634995579719543, 0.5247450470924377,
     0.31827396154403687, 0.1703597754240036, 0.08047226071357727, 0.033545829355716705,
     0.012340820394456387, 0.004006478004157543, 0.0011478752130642533, 0.00029022834496572614,
     6.475871487054974e-05, 1.2751753274642397e-05, 2.2159242689667735e-06,
     3.3982337299676146e-07),
    (-5.050895879321615e-07, -0.3676218092441559, -0.4771935045719147, -0.45917439460754395,
     -0.35804125666618347, -0.23423689603805542, -0.1307770311832428, -0.06286688894033432,
     -0.026239346712827682, -0.009483229368925095, -0.0029884062241762877,
     -0.0008256980217993259, -0.00020504751591943204, -7.377430301858112e-05,
     -4.7678286136942916e-06, 1.80376046046149e-05),
    (-0.3760944902896881, -0.23485149443149567, -0.05568249896168709, 0.09291660785675049,
     0.1624530702829361, 0.1579374372959137, 0.11484050005674362, 0.06744137406349182,
     0.033037662506103516, 0.013730484060943127, 0.004890331532806158, 0.0015024637104943395,
     0.0003999831678811461, 9.256879275199026e-05, 1.866933234850876e-05, 3.2873683721845737e-06),
    (-0.0006123273051343858, 0.16501691937446594, 0.17746585607528687, 0.11614061146974564,
     0.025136124342679977, -0.03182315081357956, -0.04809357598423958, -0.04762265831232071,
     -0.023793157190084457, -0.01860128529369831, -0.009625759907066822, -0.0033625841606408358,
     -0.0001023974982672371, 0.00508503383025527, -0.0005863643018528819, -0.0032971850596368313),
    (0.11789938062429428, 0.04368298873305321, -0.026481647044420242, -0.06632918119430542,
     -0.06133080646395683, -0.030615447089076042, -0.0022181635722517967, 0.01136732380837202,
     0.012451608665287495, 0.00836187694221735, 0.0042338743805885315, 0.0017256352584809065,
     0.0005832145689055324, 0.00016618100926280022, 4.033797449665144e-05, 8.398958925681654e-06),
    (-0.018992174416780472, 0.009340767748653889, -0.08166860789060593, -0.1666967272758484,
     0.13449637591838837, 0.0783679410815239, -0.05455993488430977, 0.23255574703216553,
     -0.11116353422403336, 0.22982259094715118, 0.17715279757976532, 0.06193714961409569,
     -0.01984380930662155, -0.2228037416934967, 0.023610301315784454, 0.14019158482551575),
)


def fits(lanes):
    """Whether a vector of `lanes` float32 splits into 16-lane parts, halving each time."""
    return lanes >= 16 and lanes & (lanes - 1) == 0


def erf(m, x):
    """erf of the float32 vector `x` (`fits` its lanes) through the `intrinsics.Math`
    helper `m`: a wider vector (a matmul's epilogue over a 64-wide row tile) is split into
    16-lane halves, each looked up on its own, and joined again."""
    n = x.type.count
    if n == 16:
        return _erf_16(type(m)(m.em, x.type), x)      # `m` may be of the wider type
    b = m.b
    half = n // 2

    def part(lo):
        return b.shuffle_vector(x, x, ir.Constant(ir.VectorType(I32, half),
                                                  list(range(lo, lo + half))))
    lo, hi = erf(m, part(0)), erf(m, part(half))
    return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, n), list(range(n))))


def _erf_16(m, x):
    b = m.b
    vt = x.type
    it = ir.VectorType(I32, 16)
    mb = m.em.mb
    perm = mb.intrinsic("llvm.x86.avx512.permvar.sf.512", vt, [vt, it])
    # cvttps2dq: a NaN lane gets 0x80000000 (interval 0 and a NaN result) where fptosi
    # would give poison
    mask = ir.IntType(16)
    cvt = mb.intrinsic("llvm.x86.avx512.mask.cvttps2dq.512", it, [vt, it, mask, I32])
    ax = m.intr("fabs", x)
    # an ordered compare keeps a NaN lane NaN
    xc = b.select(b.fcmp_ordered(">", ax, m.c(_CLAMP)), m.c(_CLAMP), ax)
    idx = b.call(cvt, [b.fmul(xc, m.c(1 / _WIDTH)), ir.Constant(it, None),
                       ir.Constant(mask, -1), ir.Constant(I32, 4)])

    def look(table):
        return b.call(perm, [ir.Constant(vt, list(table)), idx])

    r = b.fsub(xc, look(_CENTRES))
    acc = look(_COEFFS[-1])
    for row in reversed(_COEFFS[1:-1]):
        acc = m.fma(acc, r, look(row))
    base = m.fma(r, look(_IDENTITY), look(_COEFFS[0]))
    return m.intr("copysign", m.fma(acc, r, base), x)
