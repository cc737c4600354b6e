package webhook

// VerifyAt is Verify with the receiver's clock at now (for the specification's test vector, signed
// in 2021).
var VerifyAt = verifyAt
