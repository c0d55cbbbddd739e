/// How a segmented run ended, as the segment coordinator reports it to the download's machine (failures
/// and stops are told apart, as errors): every range written, a restart from zero for `reason`, or a
/// fresh URL wanted after the server refused the current one with `status`.
package enum SegmentRunOutcome: Sendable, Hashable {
    case complete
    case restart(RestartReason)
    case refreshURL(status: Int)
}
