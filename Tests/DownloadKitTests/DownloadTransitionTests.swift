import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit

/// The engine names what happened; `DownloadTransition` decides the published (state, reason) pair, so
/// only these pairs exist (issue #12: `.cancelled` with `.pausedByCaller` was one the old code wrote).
@Suite("DownloadTransition")
struct DownloadTransitionTests {
    @Test func everyTransitionHasItsOnePair() {
        let failure = DownloadError(.httpStatus, "404 Not Found", httpStatus: 404)
        let full = DownloadError(.diskFull, "no space left")
        let reset = DownloadError(.transport, "connection reset", isTransient: true)
        let table: [(DownloadTransition, DownloadState, DownloadStateReason)] = [
            (.start, .connecting, .started),
            (.resume(offset: 7), .connecting, .resumed(offset: 7)),
            (.restart(.validatorChanged), .connecting, .restarted(.validatorChanged)),
            (.redirect(to: "http://b/"), .connecting, .redirected(to: "http://b/")),
            (.refreshURL(to: "http://c/"), .connecting, .urlRefreshed(to: "http://c/")),
            (.stayOnOneConnection("too small"), .connecting, .singleConnection("too small")),
            (.notResumable, .connecting, .notResumable),
            (.receive(resumedFrom: 0), .downloading, .started),
            (.receive(resumedFrom: 9), .downloading, .resumed(offset: 9)),
            (.segmented(connections: 4), .downloading, .segmented(connections: 4)),
            (.retry(after: .seconds(2), attempt: 1, error: reset), .retrying, .retrying(after: .seconds(2), attempt: 1, error: reset)),
            (.verify, .verifying, .bodyComplete),
            (.complete, .completed, .finished),
            (.keepExistingFile, .completed, .keptExistingFile),
            (.pause, .paused, .pausedByCaller),
            (.cancel, .cancelled, .cancelledByCaller),
            (.fail(failure), .failed, .error("404 Not Found")),
            (.fail(full), .failed, .diskFull),
        ]
        for (transition, state, reason) in table {
            #expect(transition.pair == (state, reason), "\(transition)")
        }
    }
}
