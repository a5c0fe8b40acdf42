// Reduction kernels: placeholder until the store backend lands.
namespace accrun::collectives {}
