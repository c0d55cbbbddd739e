// The one libFuzzer binary. Scripts/fuzz.sh compiles every target's harness and the library sources they
// exercise into Fuzz/bin/fuzz-all once (one compile of HTTPWire instead of seven, ten compiles in all
// before), and links Fuzz/bin/fuzz-<target> to it: the name the binary is started by picks the harness.
// Each run still exercises one target, with its own corpus, length limit and leak setting; inputs of
// the other targets' code are simply never reached.
#if canImport(Glibc)
import Glibc
#endif

enum FuzzTarget: String, CaseIterable {
    case parser, grammars, filenames, resumeinfo, netrc, cookies, challenges, sessionprotocol, proxy, rpcrequest, metalink

    /// The target of a binary started as `…/fuzz-<target>`, nil for any other name.
    static let selected: FuzzTarget? = {
        guard let path = CommandLine.arguments.first else { return nil }
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard name.hasPrefix("fuzz-") else { return nil }
        return FuzzTarget(rawValue: String(name.dropFirst("fuzz-".count)))
    }()

    func run(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
        switch self {
        case .parser: fuzzParser(data, size)
        case .grammars: fuzzGrammars(data, size)
        case .filenames: fuzzFileNames(data, size)
        case .resumeinfo: fuzzResumeInfo(data, size)
        case .netrc: fuzzNetrc(data, size)
        case .cookies: fuzzCookies(data, size)
        case .challenges: fuzzChallenges(data, size)
        case .sessionprotocol: fuzzSessionProtocol(data, size)
        case .proxy: fuzzProxy(data, size)
        case .rpcrequest: fuzzRPCRequest(data, size)
        case .metalink: fuzzMetalink(data, size)
        }
    }
}

/// Refuses to start under a name that is no target (before libFuzzer reads a corpus or runs an input).
@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> Int32 {
    if FuzzTarget.selected == nil {
        let names = FuzzTarget.allCases.map { "fuzz-" + $0.rawValue }.joined(separator: ", ")
        fputs("started as \(CommandLine.arguments.first ?? "?"): run this binary as one of \(names)\n", stderr)
        exit(2)
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    FuzzTarget.selected!.run(data, size)
}
