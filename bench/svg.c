/* svg.c - the benches' SVG writer; see svg.h. */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_W 760
#define SVG_TOP 36                 /* the document title's band */
#define SVG_ML 70                  /* plot margins inside a panel */
#define SVG_MR 150                 /* room for the legend */
#define SVG_MT 34
#define SVG_MB 46

struct svg_doc {
    FILE *f;
    char *path;
    int n_panels;
};

static const char *const svg_colours[] = {"#2f7de1", "#f0a43a", "#7b2fd0", "#2e9e5b", "#e0344b", "#6a7385"};
#define SVG_N_COLOURS (sizeof svg_colours / sizeof svg_colours[0])

/* s as XML character data / attribute text. */
static void svg_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f); /* control characters are not XML */
        }
    }
}

static void svg_label(FILE *f, double x, double y, const char *anchor, const char *extra, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra ? extra : "");
    svg_text(f, s);
    fputs("</text>\n", f);
}

svg_doc *svg_open(const char *path, int n_panels, const char *title)
{
    svg_doc *d = calloc(1, sizeof *d);
    if (!d || !(d->path = strdup(path)) || !(d->f = fopen(path, "w"))) {
        fprintf(stderr, "pagellm bench: cannot write --svg '%s': %s\n", path, strerror(errno ? errno : ENOMEM));
        if (d) free(d->path);
        free(d);
        return NULL;
    }
    d->n_panels = n_panels;
    const int h = SVG_TOP + n_panels * SVG_PANEL_H;
    fprintf(d->f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<title>",
            SVG_W, h, SVG_W, h);
    svg_text(d->f, title);
    fprintf(d->f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W, h);
    svg_label(d->f, SVG_W / 2.0, 24, "middle", " font-size=\"15\" font-weight=\"bold\"", title);
    return d;
}

/* A "nice" upper bound (1, 2 or 5 x 10^k) at or above v > 0. */
static double svg_nice(double v)
{
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void svg_num(char *buf, size_t n, double v)
{
    if (fabs(v) >= 1e7 || (v != 0 && fabs(v) < 1e-2)) snprintf(buf, n, "%.3g", v);
    else if (fabs(v) >= 100) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.3g", v);
}

typedef struct {
    double x0, y0, w, h; /* plot area in document pixels */
} svg_area;

/* The panel's frame: title, y axis from 0 to ymax with grid lines, labels. */
static svg_area svg_frame(svg_doc *d, int panel, const char *title, const char *xlabel, const char *ylabel, double ymax)
{
    FILE *f = d->f;
    svg_area a = {SVG_ML, SVG_TOP + panel * SVG_PANEL_H + SVG_MT, SVG_W - SVG_ML - SVG_MR, SVG_PANEL_H - SVG_MT - SVG_MB};
    fprintf(f, "<g class=\"panel\" data-panel=\"%d\">\n", panel);
    svg_label(f, a.x0, a.y0 - 12, "start", " font-size=\"13\" font-weight=\"bold\"", title);
    for (int i = 0; i <= 5; i++) {
        double v = ymax * i / 5, y = a.y0 + a.h - a.h * i / 5;
        char b[32];
        svg_num(b, sizeof b, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e6eb\"/>\n", a.x0, y, a.x0 + a.w, y);
        svg_label(f, a.x0 - 6, y + 4, "end", NULL, b);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#6a7385\"/>\n", a.x0,
            a.y0, a.w, a.h);
    if (xlabel) svg_label(f, a.x0 + a.w / 2, a.y0 + a.h + 36, "middle", NULL, xlabel);
    char rot[96];
    snprintf(rot, sizeof rot, " transform=\"rotate(-90 %.1f %.1f)\"", 16.0, a.y0 + a.h / 2);
    svg_label(f, 16, a.y0 + a.h / 2, "middle", rot, ylabel);
    return a;
}

static void svg_legend(FILE *f, const svg_area *a, int i, const char *name)
{
    double y = a->y0 + 8 + 18 * i;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", a->x0 + a->w + 12, y,
            svg_colours[i % SVG_N_COLOURS]);
    svg_label(f, a->x0 + a->w + 30, y + 10, "start", NULL, name);
}

void svg_lines(svg_doc *d, int panel, const char *title, const char *xlabel, const char *ylabel, const svg_series *s,
               int n_series)
{
    if (!d) return;
    double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
    for (int k = 0; k < n_series; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymax = fmax(ymax, y);
        }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1;
    if (xmin > 0) xmin = 0; /* times and client counts read best from 0 */
    if (xmax == xmin) xmax = xmin + 1;
    ymax = svg_nice(ymax);
    svg_area a = svg_frame(d, panel, title, xlabel, ylabel, ymax);
    FILE *f = d->f;
    for (int i = 0; i <= 4; i++) { /* x ticks */
        double v = xmin + (xmax - xmin) * i / 4, x = a.x0 + a.w * i / 4;
        char b[32];
        svg_num(b, sizeof b, v);
        svg_label(f, x, a.y0 + a.h + 16, "middle", NULL, b);
    }
    for (int k = 0; k < n_series; k++) {
        const char *c = svg_colours[k % SVG_N_COLOURS];
        fputs("<g class=\"series\" data-name=\"", f);
        svg_text(f, s[k].name);
        fprintf(f, "\" fill=\"%s\">\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", c, c);
        size_t pts = 0;
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            fprintf(f, "%s%.1f,%.1f", pts++ ? " " : "", a.x0 + a.w * (x - xmin) / (xmax - xmin), a.y0 + a.h - a.h * y / ymax);
        }
        fputs("\"/>\n", f);
        if (s[k].n <= 64) /* dots where there are few points (one per level, say) */
            for (size_t i = 0; i < s[k].n; i++)
                if (isfinite(s[k].x[i]) && isfinite(s[k].y[i]))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n", a.x0 + a.w * (s[k].x[i] - xmin) / (xmax - xmin),
                            a.y0 + a.h - a.h * s[k].y[i] / ymax);
        fputs("</g>\n", f);
        svg_legend(f, &a, k, s[k].name);
    }
    fputs("</g>\n", f);
}

void svg_bars(svg_doc *d, int panel, const char *title, const char *ylabel, const char *const *groups, int n_groups,
              const char *const *series, const double *values, int n_series)
{
    if (!d || n_groups < 1 || n_series < 1) return;
    double ymax = 0;
    for (int i = 0; i < n_groups * n_series; i++)
        if (isfinite(values[i])) ymax = fmax(ymax, values[i]);
    ymax = svg_nice(ymax);
    svg_area a = svg_frame(d, panel, title, NULL, ylabel, ymax);
    FILE *f = d->f;
    const double gw = a.w / n_groups, bw = gw * 0.8 / n_series;
    for (int g = 0; g < n_groups; g++) svg_label(f, a.x0 + gw * (g + 0.5), a.y0 + a.h + 16, "middle", NULL, groups[g]);
    for (int k = 0; k < n_series; k++) {
        fputs("<g class=\"series\" data-name=\"", f);
        svg_text(f, series[k]);
        fprintf(f, "\" fill=\"%s\">\n", svg_colours[k % SVG_N_COLOURS]);
        for (int g = 0; g < n_groups; g++) {
            double v = values[k * n_groups + g];
            if (!isfinite(v) || v <= 0) continue;
            double h = a.h * v / ymax, x = a.x0 + gw * g + gw * 0.1 + bw * k;
            char b[32];
            svg_num(b, sizeof b, v);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>", x, a.y0 + a.h - h, bw, h);
            svg_text(f, groups[g]);
            fputs(" ", f);
            svg_text(f, series[k]);
            fprintf(f, ": %s</title></rect>\n", b);
            svg_label(f, x + bw / 2, a.y0 + a.h - h - 3, "middle", " font-size=\"10\" fill=\"#1d2330\"", b);
        }
        fputs("</g>\n", f);
        svg_legend(f, &a, k, series[k]);
    }
    fputs("</g>\n", f);
}

int svg_close(svg_doc *d)
{
    if (!d) return -1;
    fputs("</svg>\n", d->f);
    int bad = ferror(d->f);
    if (fclose(d->f) != 0) bad = 1;
    if (bad) fprintf(stderr, "pagellm bench: writing --svg '%s' failed\n", d->path);
    free(d->path);
    free(d);
    return bad ? -1 : 0;
}
