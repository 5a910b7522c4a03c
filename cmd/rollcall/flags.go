package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the zap logger of a long-running command, writing to w.
// The console format colours levels only when w is a terminal. The returned
// level is the logger's, changeable while it runs (SIGHUP reloads
// --log-level).
func newLogger(level, format string, w io.Writer) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("--log-level: %w", err)
	}
	var enc zapcore.Encoder
	switch format {
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		if isTerminal(w) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, zap.AtomicLevel{}, fmt.Errorf("--log-format %q: want console or json", format)
	}
	atom := zap.NewAtomicLevelAt(lvl)
	out := zapcore.Lock(zapcore.AddSync(w))
	opts := []zap.Option{zap.AddCaller(), zap.ErrorOutput(out)}
	if lvl <= zapcore.DebugLevel {
		opts = append(opts, zap.AddStacktrace(zapcore.ErrorLevel))
	}
	return zap.New(zapcore.NewCore(enc, out, atom), opts...), atom, nil
}

// checkLogFlags checks --log-level and --log-format without building a
// logger.
func checkLogFlags(level, format string) error {
	_, _, err := newLogger(level, format, io.Discard)
	return err
}
