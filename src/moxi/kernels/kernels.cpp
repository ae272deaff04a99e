// placeholder so the kernels library has a source until the first kernel lands.
namespace moxi::kernels {}
