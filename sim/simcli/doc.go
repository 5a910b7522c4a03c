// Package simcli is the command line of the simulator: `rollcall sim`'s
// flags (NewFlagSet, ParseArgs, Options.Runs), its table, JSON and CSV
// output (WriteTable, WriteJSON, WriteCSV), its plots (Plot, PlotCurves,
// drawn with gonum), and `rollcall sim calibrate` (Calibrate).
//
// Only cmd/rollcall imports it. The libraries it drives, sim/ and
// sim/calibrate, take a Config or a Scenario and return plain results:
// they parse no flags and draw nothing, so neither they nor the agent
// link the plotting code (sim's TestLibraryImportsNoCLI checks it).
//
// The scenario files in testdata/sim/ (from the module root) are `rollcall sim` command lines with
// their table output; TestScenarios replays them, and
// `go test ./sim/simcli -run TestScenarios -rewrite` records the current
// output as expected.
//
// The driving loop of `rollcall sim`:
//
//	o, err := simcli.ParseArgs(args, stderr) // flags to a sim.Config, or one per sweep value
//	runs, err := o.Runs()
//	for _, cfg := range runs {
//		res, err := sim.Run(ctx, cfg)
//		rows = append(rows, simcli.Row{Result: res}) // with Sweep and Value for a sweep
//	}
//	simcli.WriteTable(stdout, rows) // or WriteJSON, WriteCSV; then Plot, PlotCurves
package simcli
