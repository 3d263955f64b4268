// Starts dynalite for the fencekit tests, with dynalite's own command-line
// flags. dynalite 4.0.0 throws from a request's 'error' event, so a client
// that gives up on a request while sending it (a cancelled context, a cut
// connection) would end the whole server. Here such an error ends only
// that request; any other uncaught error still ends the server, loudly.
process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.code === 'ECONNABORTED' || err.message === 'aborted')) {
    return
  }
  console.error(err)
  process.exit(1)
})
require('dynalite/cli.js')
