package node

// For the browser tests of package node_test (jsclient_browser_test.go).
var NewBrowser = newBrowser
