package benchbus

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// series is one line of a chart.
type series struct {
	Name string
	X, Y []float64
}

// chart is a line chart written as SVG, with no dependencies.
type chart struct {
	Title, XLabel, YLabel string
	Series                []series
	LogY                  bool
	HLine                 float64 // a dashed reference line (0 = none)
	HLineLabel            string
}

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#e7969c"}

func (c chart) write(path string) error {
	const H = 420
	const left, top, bottom = 70, 40, 50
	longest := 0
	for _, s := range c.Series {
		longest = max(longest, len([]rune(s.Name)))
	}
	right := 60 + 7*longest
	W := 560 + right
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i := range s.X {
			if c.LogY && s.Y[i] <= 0 {
				continue
			}
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
		}
	}
	if c.HLine > 0 {
		ymin, ymax = math.Min(ymin, c.HLine), math.Max(ymax, c.HLine)
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	xmin = math.Min(xmin, 0)
	if xmax == xmin {
		xmax = xmin + 1
	}
	var ty func(float64) float64
	var yticks []float64
	if c.LogY {
		lo := math.Floor(math.Log10(math.Max(ymin, 1e-3)))
		hi := math.Ceil(math.Log10(math.Max(ymax, 1e-3)))
		if hi == lo {
			hi = lo + 1
		}
		ty = func(v float64) float64 {
			return float64(top) + ph*(1-(math.Log10(math.Max(v, 1e-3))-lo)/(hi-lo))
		}
		for e := lo; e <= hi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	} else {
		ymin = math.Min(ymin, 0)
		step := niceStep(ymax - ymin)
		ymax = math.Ceil(ymax/step) * step
		if ymax == ymin {
			ymax = ymin + 1
		}
		ty = func(v float64) float64 { return float64(top) + ph*(1-(v-ymin)/(ymax-ymin)) }
		for v := ymin; v <= ymax+step/2; v += step {
			yticks = append(yticks, v)
		}
	}
	tx := func(v float64) float64 { return float64(left) + pw*(v-xmin)/(xmax-xmin) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.Title))
	for _, v := range yticks {
		y := ty(v)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, float64(left)+pw, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, fmtTick(v))
	}
	xstep := niceStep(xmax - xmin)
	for v := math.Ceil(xmin/xstep) * xstep; v <= xmax+xstep/1e6; v += xstep {
		x := tx(v)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/>`+"\n", x, x, top, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, float64(top)+ph+16, fmtTick(v))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+pw/2, H-10, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(16,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, esc(c.YLabel))
	if c.HLine > 0 {
		y := ty(c.HLine)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="5,4"/>`+"\n", left, float64(left)+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", float64(left)+pw-4, y-4, esc(c.HLineLabel))
	}
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var pts []string
		for j := range s.X {
			if c.LogY && s.Y[j] <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", tx(s.X[j]), ty(s.Y[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], col)
		}
		ly := top + 14 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", W-right+12, W-right+36, ly, ly, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", W-right+42, ly+4, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func niceStep(span float64) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case a >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 1 || a == 0:
		return trimZero(fmt.Sprintf("%.1f", v))
	}
	return trimZero(fmt.Sprintf("%.3f", v))
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
